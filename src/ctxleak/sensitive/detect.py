"""Find structured PII in raw text (ProPILE App. A.2), for building records and for redaction.

- e-mail addresses: a regular expression (dots and ``+`` tags in the local part, subdomains);
- phone numbers: :class:`phonenumbers.PhoneNumberMatcher` with a default region (``US``), keeping
  only numbers that :func:`phonenumbers.is_valid_number` accepts;
- physical addresses: ``pyap2`` (the maintained fork of pyap; it installs the ``pyap`` module)
  for US, CA or GB addresses.

Dates (``2024-05-01``, ``05/01/2024``) and card-like digit runs (13-19 digits, or groups of four)
are masked before the phone and address searches, so they never become PII spans; e-mails and
phones are masked before the address search, and any remaining overlap is resolved by keeping
e-mail over phone over address.

Names come from a structured ``name`` field of the input (an NER extra is out of scope); for
plain text a labelled line ``Name: First Last`` is accepted.

The same detectors mask PII under ``--redact`` (:func:`redaction_spans`), there tuned for recall:
phone-shaped numbers count even when phonenumbers does not validate them (the demo data's
fictional ``(555) 010-4417``); money amounts (:func:`find_amounts`) are masked too; and names
are found by :func:`find_names`: the names given (a record's ``name``), capitalised words after
a cue (``Patient:``, ``Employee:``, ``Approved by:``, ``Dr``, ``Hi``...) or after a field label
at a line start (``Reviewer: Ines Okafor``), and those matching the local part of an e-mail
address in the text; then every occurrence of their words. Roles, greetings and forms of
address (``Customer``, ``Team``, ``Dear``) are never taken for a name.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import phonenumbers
import pyap
import pyap.source_CA.data
import pyap.source_GB.data
import pyap.source_US.data

from ctxleak.errors import ConfigError
from ctxleak.normal_text import normal_text
from ctxleak.sensitive.amounts import find_amounts
from ctxleak.sensitive.european import find_german_addresses, find_ibans, is_iban
from ctxleak.sensitive.names import find_names as _find_names
from ctxleak.sensitive.names import name_from_text
from ctxleak.sensitive.national import find_local_phones, find_national_phones
from ctxleak.sensitive.span import EMAIL_RE, Span, merge_spans, on_normal
from ctxleak.sensitive.us_addresses import (
    city_ranges,
    intersect,
    street_cues,
    us_address_matches,
    with_cue_before,
)
from ctxleak.sensitive.windows import windows

__all__ = [
    "EMAIL_RE",
    "Span",
    "check_region",
    "clean_address",
    "find_addresses",
    "find_amounts",
    "find_emails",
    "find_german_addresses",
    "find_ibans",
    "find_phones",
    "is_iban",
    "keep_disjoint",
    "find_names",
    "find_pii",
    "merge_spans",
    "name_from_text",
    "redaction_spans",
]

SPAN_TYPES = ("email", "phone", "address")
_PRIORITY = {"email": 0, "phone": 1, "amount": 2, "address": 3, "name": 4}
_ADDRESS_COUNTRIES = ("US", "CA", "GB")

# Dates: ISO (2024-05-01, 2024/05/01, 2024.05.01) and day/month/year either way round.
_DATE_RE = re.compile(
    r"(?<![\d.\-/])(?:\d{4}([-/.])\d{1,2}\1\d{1,2}|\d{1,2}([-/.])\d{1,2}\2(?:\d{4}|\d{2}))"
    r"(?![\d\-/]|\.\d)"
)
# Card-like numbers: an unbroken run of 13-19 digits, four groups of four (optionally a fifth
# short group), or the 4-6-5 grouping.
_CARD_RE = re.compile(
    r"(?<![\d\-])(?:\d{13,19}"
    r"|\d{4}([ \-])\d{4}\1\d{4}\1\d{4}(?:\1\d{1,3})?"
    r"|\d{4}([ \-])\d{6}\2\d{5})(?!\d)"
)
_SEP = r"[ \t.\-\u2013]?"  # one optional separator: space, dot, hyphen, en dash
#: Phone-shaped numbers, validated or not (redaction): North American 3-3-4 with optional +1,
#: international with a leading +, and grouped numbers with a bracketed area code.
PHONE_SHAPE_RE = re.compile(
    r"(?<![\w+])(?:"
    rf"(?:\+?1{_SEP})?(?:\(\d{{3}}\)|\d{{3}}){_SEP}\d{{3}}{_SEP}\d{{4}}"
    rf"|\+\d{{1,3}}(?:{_SEP}(?:\(\d{{1,4}}\)|\d{{1,5}})){{2,6}}"
    rf"|\(\d{{2,5}}\){_SEP}\d{{3,4}}{_SEP}\d{{3,5}}"
    r")(?!\w)"
)
_NANP_RE = re.compile(
    r"(?<![\w+.\-])(?:\+?1[ .\-]?)?(?:\(\d{3}\)[ ]?|\d{3}[ .\-]?)\d{3}[ .\-]?\d{4}"
    r"(?![\w\-]|\.\d)"
)


def _mask(text: str, spans: Iterable[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def _noise_spans(text: str) -> list[tuple[int, int]]:
    """Dates and card-like numbers: never PII spans of ours, masked before phone/address search."""
    return [m.span() for m in _DATE_RE.finditer(text)] + [m.span() for m in _CARD_RE.finditer(text)]


def find_emails(text: str) -> list[Span]:
    """E-mail addresses (local part with dots and ``+`` tags, any number of subdomains)."""
    return [Span("email", m.start(), m.end(), m.group(0), 1.0) for m in EMAIL_RE.finditer(text)]


def check_region(region: str) -> str:
    """The upper-case region code, or :class:`ConfigError` if phonenumbers does not know it."""
    region = (region or "").upper()
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise ConfigError(f"unknown phone region {region!r}: use a two-letter region code that "
                          "the phonenumbers package knows, e.g. US, GB, CA, DE")
    return region


def find_phones(text: str, region: str = "US", *, _masked: str | None = None,
                valid_only: bool = True) -> list[Span]:
    """Phone numbers that :mod:`phonenumbers` finds (default region ``region``) and validates;
    with ``valid_only=False`` (redaction) also phone-shaped numbers it does not validate
    (:data:`PHONE_SHAPE_RE`, 7 to 15 digits; score 0.5), national numbers of other regions
    and seven-digit local ones (:mod:`ctxleak.sensitive.national`).

    Dates and card-like numbers are masked first, so ``05/01/2024`` or ``4111 1111 1111 1111``
    never count and never swallow a phone number next to them.
    """
    region = check_region(region)
    masked = _masked if _masked is not None else _mask(text, _noise_spans(text))
    spans = []
    for match in phonenumbers.PhoneNumberMatcher(masked, region,
                                                 leniency=phonenumbers.Leniency.VALID):
        if not phonenumbers.is_valid_number(match.number):
            continue
        spans.append(Span("phone", match.start, match.end, text[match.start:match.end], 0.95))
    # The matcher gives up on a number followed by more digits ("(212) 555-0123 100 Main
    # Street"): try the North American 3-3-4 shapes on their own as well.
    for m in _NANP_RE.finditer(masked):
        if any(m.start() < s.end and s.start < m.end() for s in spans):
            continue
        try:
            number = phonenumbers.parse(m.group(0), region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            spans.append(Span("phone", m.start(), m.end(), text[m.start():m.end()], 0.95))
    # A phone shape runs on over the digits after the number ("+49 171 5550 2291 3 times"):
    # the number is its longest prefix, in whole digit groups, that phonenumbers validates.
    for m in PHONE_SHAPE_RE.finditer(masked):
        if any(m.start() < s.end and s.start < m.end() for s in spans):
            continue
        end = _valid_prefix_end(m.group(0), region)
        if end:
            spans.append(Span("phone", m.start(), m.start() + end,
                              text[m.start():m.start() + end], 0.95))
        elif not valid_only and 7 <= sum(c.isdigit() for c in m.group(0)) <= 15:
            spans.append(Span("phone", m.start(), m.end(), text[m.start():m.end()], 0.5))
    if not valid_only:  # numbers written at home in another country, seven-digit local ones
        for s in [*find_national_phones(masked), *find_local_phones(masked)]:
            if not any(s.start < t.end and t.start < s.end for t in spans):
                spans.append(Span("phone", s.start, s.end, text[s.start:s.end], s.score))
    return sorted(spans, key=lambda s: s.start)


def _valid_prefix_end(shape: str, region: str) -> int:
    """The end of the longest prefix of ``shape`` ending a digit group that phonenumbers
    validates (7 digits or more), or 0."""
    ends = [i + 1 for i, c in enumerate(shape)
            if c.isdigit() and (i + 1 == len(shape) or not shape[i + 1].isdigit())]
    for end in reversed(ends):
        prefix = shape[:end]
        if sum(c.isdigit() for c in prefix) < 7:
            break
        try:
            number = phonenumbers.parse(prefix, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return end
    return 0


#: the longest run the patterns below read at once: more than any window pyap is handed
_RUN = 4096
#: pyap's own text normalisation (``[\ \t]*(\,[\ \t]*)+`` -> ", ", ``\ +`` -> " ", dashes), the
#: same finds on any text of up to :data:`_RUN` characters; each match starts only where a run
#: of spaces starts, so a long run of spaces is read once, not once per space as pyap's is
_PYAP_NORMALIZE = (
    (re.compile(rf"(?<![ \t])[ \t]{{0,{_RUN}}}(?:,[ \t]{{0,{_RUN}}}){{1,{_RUN}}}"), ", "),
    (re.compile(rf"(?<! ) {{1,{_RUN}}}"), " "),
    (re.compile("[\u2010\u2011\u2012\u2013\u2014\u2015]"), "-"),
)


def _normalize_with_offsets(text: str) -> tuple[str, list[int], list[int]]:
    """pyap's own text normalisation (commas, runs of spaces, dashes), keeping for each output
    character the start and end of the input characters it came from."""
    starts = list(range(len(text)))
    ends = [i + 1 for i in range(len(text))]
    for pattern, repl in _PYAP_NORMALIZE:
        out: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        pos = 0
        for m in pattern.finditer(text):
            if m.end() == m.start():
                continue
            out.append(text[pos:m.start()])
            new_starts += starts[pos:m.start()]
            new_ends += ends[pos:m.start()]
            out.append(repl)
            new_starts += [starts[m.start()]] * len(repl)
            new_ends += [ends[m.end() - 1]] * len(repl)
            pos = m.end()
        out.append(text[pos:])
        new_starts += starts[pos:]
        new_ends += ends[pos:]
        text, starts, ends = "".join(out), new_starts, new_ends
    return text, starts, ends


_TRIM = " ,;:\n\t\r"


#: What every address pyap2 finds ends in, by country: a state or a ZIP code (US), a postcode
#: (GB), a province (CA); pyap's own patterns (a library's: their quantifiers are its own).
#: pyap reads only the text around one (:data:`_BEFORE_ANCHOR` characters before it,
#: :data:`_AFTER_ANCHOR` after; for the US only where a street word comes before it, and
#: only near a city that a state or a ZIP code follows: :func:`city_ranges`), in
#: windows: its patterns take up to 0.3 ms a character on digits and spaces ("1 1 1 ...", a
#: table) and where street numbers, states and ZIP codes are dense, wherever they start.
_PYAP_ANCHORS = {
    country: re.compile(pattern, re.VERBOSE | re.UNICODE) for country, pattern in (
        ("US", rf"{pyap.source_US.data.make_region1()}|{pyap.source_US.data.postal_code_re}"),
        ("GB", pyap.source_GB.data.postal_code),
        ("CA", pyap.source_CA.data.region1),
    )}
_BEFORE_ANCHOR = 300
_AFTER_ANCHOR = 80
#: the windows pyap reads (characters each owns, and the margin: the longest address found);
#: pyap's time is linear in a window's length, so a window owns much more than its margins
_PYAP_SIZE = 4000
_PYAP_MARGIN = 300


def _pyap_regions(masked: str, country: str) -> list[tuple[int, int]]:
    """The parts of ``masked`` that may hold an address: around each anchor (for the US, each
    with a street word before it, and near a city with a state or ZIP code after it:
    :mod:`ctxleak.sensitive.us_addresses`), starting after a space where one is near."""
    anchors = [m.span() for m in _PYAP_ANCHORS[country].finditer(masked)]
    if country == "US":  # only an anchor with a street word before it can end an address
        anchors = with_cue_before(anchors, street_cues(masked), _BEFORE_ANCHOR + 100)
    regions = merge_spans((_after_space(masked, max(0, a_start - _BEFORE_ANCHOR)),
                           min(len(masked), a_end + _AFTER_ANCHOR)) for a_start, a_end in anchors)
    if country == "US" and regions:  # and only around a city with a state or ZIP code after it
        regions = merge_spans((_after_space(masked, a), b) for a, b in intersect(
            regions, city_ranges(masked, _BEFORE_ANCHOR)))
    return regions


def _after_space(text: str, start: int) -> int:
    """``start``, or the nearest place at most 100 characters before it that follows a space."""
    for i in range(start, max(0, start - 100), -1):
        if text[i - 1].isspace():
            return i
    return start


def _pyap_matches(norm: str, country: str) -> list[tuple[int, int, str | None]]:
    """(start, end, postal code) of each address pyap2's grammar finds in ``norm``."""
    if country == "US":
        return us_address_matches(norm)
    return [(int(a.match_start), int(a.match_end), getattr(a, "postal_code", None) or None)
            for a in pyap.parse(norm, country=country)]  # type: ignore[arg-type]  # checked


def _pyap_spans(text: str, masked: str, lo: int, hi: int, country: str) -> list[Span]:
    """What pyap2 finds in ``masked[lo:hi]``, with offsets into ``text``."""
    norm, starts, ends = _normalize_with_offsets(masked[lo:hi])
    spans = []
    for ms, me, postal in _pyap_matches(norm, country):
        if not 0 <= ms < me <= len(norm):
            continue
        start, end = lo + starts[ms], lo + ends[me - 1]
        while start < end and text[start] in _TRIM:
            start += 1
        while end > start and text[end - 1] in _TRIM:
            end -= 1
        if postal:
            # pyap matches regions case-insensitively, so "..., CA 94043 or call" ends in the
            # region "or"; a lowercase word after the postal code is never part of the address.
            cut = text.rfind(postal, start, end)
            if cut >= 0:
                rest = text[cut + len(postal):end].strip(_TRIM)
                if rest and rest == rest.lower():
                    end = cut + len(postal)
        if end <= start:
            continue
        score = 0.9 if postal else 0.6
        spans.append(Span("address", start, end, text[start:end], score))
    return spans


def find_addresses(text: str, country: str = "US", *, _masked: str | None = None) -> list[Span]:
    """Physical addresses found by pyap2 (``country`` is US, CA or GB), with offsets into
    ``text``. Dates, card-like numbers, e-mails and phones should be masked in ``_masked``.

    pyap reads only the text near a state, ZIP code, postcode or province (every address it
    finds ends in one; a US one with a street word before it and a city just before the
    state or ZIP code), in windows of at most
    ``_PYAP_SIZE + 2 * _PYAP_MARGIN`` characters (:mod:`ctxleak.sensitive.windows`): linear
    time in the text's length."""
    country = country.upper()
    if country not in _ADDRESS_COUNTRIES:
        raise ConfigError(f"addresses can be found for US, CA or GB, not {country!r}")
    masked = _masked if _masked is not None else _mask(text, _noise_spans(text))
    spans = []
    for a, b in _pyap_regions(masked, country):
        for w in windows(masked[a:b], _PYAP_SIZE, _PYAP_MARGIN):
            spans += [s for s in _pyap_spans(text, masked, a + w.start, a + w.end, country)
                      if a + w.own_start <= s.start < a + w.own_end]
    return spans


def keep_disjoint(spans: Iterable[Span], key: Callable[[Span], tuple[int, int, int]]
                  ) -> list[Span]:
    """Spans taken in ``key`` order, each kept unless it overlaps one kept before; sorted by
    position. Spans that do not overlap, sorted by (start, end), have their ends in order too,
    so the one kept span that may overlap a new one is found by bisection: n log n, not n
    squared."""
    bounds: list[tuple[int, int]] = []
    kept: list[Span] = []
    for span in sorted(spans, key=key):
        j = bisect.bisect_left(bounds, (span.end,))  # the kept spans starting before its end
        if j and kept[j - 1].end > span.start:
            continue
        i = bisect.bisect_right(bounds, (span.start, span.end))
        bounds.insert(i, (span.start, span.end))
        kept.insert(i, span)
    return kept


def _deoverlap(spans: Sequence[Span]) -> list[Span]:
    return keep_disjoint(spans, key=lambda s: (_PRIORITY[s.type], -(s.end - s.start), s.start))


def find_pii(text: str, region: str = "US", **options: Any) -> list[Span]:
    """:func:`_find_pii` on :func:`ctxleak.normal_text.normal_text` of ``text``, its spans
    mapped back to ``text``."""
    return on_normal(_find_pii, text, region, **options)


def _find_pii(text: str, region: str = "US", *, address_country: str | None = None,
             types: Sequence[str] = SPAN_TYPES, valid_only: bool = True) -> list[Span]:
    """All e-mail, phone and address spans in ``text``, sorted by position, not overlapping.

    ``region`` is the default region for phone numbers written without a country code;
    ``address_country`` (US, CA or GB) defaults to ``region`` when pyap2 supports it, else US;
    ``valid_only=False`` also counts phone-shaped numbers phonenumbers does not validate.
    """
    unknown = set(types) - set(SPAN_TYPES)
    if unknown:
        raise ValueError(f"unknown PII span types {sorted(unknown)}; choose from {SPAN_TYPES}")
    region = check_region(region)
    if address_country is None:
        address_country = region if region in _ADDRESS_COUNTRIES else "US"
    noise = _noise_spans(text)
    emails = find_emails(text)
    masked = _mask(text, noise + [(s.start, s.end) for s in emails])
    phones = find_phones(text, region, _masked=masked, valid_only=valid_only) \
        if "phone" in types else []
    spans: list[Span] = list(emails) if "email" in types else []
    spans += phones
    if "address" in types:
        masked_more = _mask(masked, [(s.start, s.end) for s in phones])
        spans += find_addresses(text, address_country, _masked=masked_more)
        spans += find_german_addresses(text, _masked=masked_more)
    return _deoverlap(spans)


def redaction_spans(text: str, names: Iterable[str] = (), region: str = "US") -> list[Span]:
    """:func:`_redaction_spans` on :func:`ctxleak.normal_text.normal_text` of ``text`` (NFKC,
    invisible characters removed), its spans mapped back to ``text``."""
    return on_normal(_redaction_spans, text, tuple(normal_text(n) for n in names), region)


def _redaction_spans(text: str, names: Iterable[str] = (), region: str = "US") -> list[Span]:
    """What ``--redact`` masks in ``text``: e-mails, phones (validated or phone-shaped) and
    addresses (:func:`find_pii`), money amounts (:func:`find_amounts`; an amount overlapping
    one of those is merged into it) and names (:func:`find_names`, ``names`` known
    beforehand), not overlapping."""
    found = find_pii(text, region, valid_only=False) + find_amounts(text)
    spans = []
    for a, b in merge_spans((s.start, s.end) for s in found):
        first = min((s for s in found if a <= s.start and s.end <= b),
                    key=lambda s: _PRIORITY[s.type])
        spans.append(first if (first.start, first.end) == (a, b)
                     else Span(first.type, a, b, text[a:b], first.score))
    taken = [(s.start, s.end) for s in spans]
    spans += [s for s in find_names(text, names)
              if all(s.end <= a or s.start >= b for a, b in taken)]
    return sorted(spans, key=lambda s: (s.start, s.end))


def find_names(text: str, known: Iterable[str] = ()) -> list[Span]:
    """:func:`ctxleak.sensitive.names.find_names` on :func:`ctxleak.normal_text.normal_text` of
    ``text`` (and of the ``known`` names), its spans mapped back to ``text``."""
    return on_normal(_find_names, text, tuple(normal_text(n) for n in known))


def clean_address(text: str) -> str:
    """One-line form of an address: line breaks become ``", "``, runs of spaces one space."""
    lines = [" ".join(part.split()) for part in re.split(r"[\r\n]", text)]
    out = ""
    for line in (ln.strip(" ,") for ln in lines):
        if not line:
            continue
        out = line if not out else f"{out}, {line}"
    return out
