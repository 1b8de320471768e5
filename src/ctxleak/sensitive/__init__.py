"""Secrets and personal data in a text, found by libraries made for it, and compared across
formats: what a RAG audit reports as copied and what ``--redact`` masks.

- Presidio (Microsoft's PII analyzer) with spaCy's English pipeline finds names and places, and,
  through recognizers written for it here, ids, PINs, prose passwords and diagnoses
  (:mod:`.presidio`);
- detect-secrets (Yelp's credential scanner) finds passwords, keys and tokens (:mod:`.secrets`);
- phonenumbers, pyap2 and ctxleak's own patterns (:mod:`ctxleak.sensitive.detect`) find phone
  numbers, postal addresses (US, British and Canadian by pyap2; German street addresses by a
  pattern), e-mail addresses, IBANs (with their mod-97 check), money amounts and cued names;
- money, dates and numbers are compared across formats (:func:`value_in`, :mod:`.values`).

Types: ``person``, ``address``, ``location``, ``email``, ``phone``, ``id``, ``password``,
``secret``, ``pin``, ``money``, ``date``, ``medical``. Overlapping finds are resolved by type
(credentials first, then contact details and addresses, places last), then by length. The
engines load on first use, once per process (importing this module loads none of them); results
are cached per text. A long text is read in windows of about a thousand characters
(:mod:`.windows`), so detection takes time linear in the text's length.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from functools import lru_cache

from ctxleak.normal_text import normal_text, normal_view
from ctxleak.sensitive.detect import (
    Span,
    find_amounts,
    find_emails,
    find_ibans,
    find_names,
    find_pii,
    keep_disjoint,
)
from ctxleak.sensitive.national import find_cjk_names, find_spaced_secrets
from ctxleak.sensitive.span import on_normal
from ctxleak.sensitive.values import date_values, value_in
from ctxleak.sensitive.windows import find_windowed, windows

__all__ = ["SENSITIVE_TYPES", "carried_values", "find_sensitive", "prepare_sensitive", "value_in"]

#: every type :func:`find_sensitive` gives, most important first (the order overlaps resolve in)
SENSITIVE_TYPES = ("password", "secret", "pin", "email", "phone", "address", "id", "money",
                   "medical", "person", "date", "location")
_RANK = {t: i for i, t in enumerate(SENSITIVE_TYPES)}
_OLD_TYPES = {"name": "person", "amount": "money"}
_MONTH_RE = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]{0,9}\b",
                       re.IGNORECASE)


def _keep_date(span: Span) -> bool:
    """A date that names a day: a full date, or a day and a month in words (spaCy also calls
    "4417", "last year" or "three weeks" dates)."""
    return bool(date_values(span.text)) or (
        any(c.isdigit() for c in span.text) and _MONTH_RE.search(span.text) is not None)


def _label(text: str, span: Span) -> bool:
    """A single word the model took for a name or a place that is a field's label
    ("Verdict: ...", "Reviewer:")."""
    return span.type in ("person", "location") and " " not in span.text \
        and text[span.end:span.end + 1] == ":"


def _deoverlap(spans: list[Span]) -> list[Span]:
    return keep_disjoint(spans, key=lambda s: (_RANK.get(s.type, 99), -(s.end - s.start),
                                               s.start))


_CACHED = 8192
#: the normal texts :func:`_find` has read, as many as its cache keeps (what
#: :func:`prepare_sensitive` need not prepare again)
_read: OrderedDict[str, None] = OrderedDict()


def _short(text: str) -> bool:
    """A number or a table cell: read by the pattern detectors alone."""
    return len(text) < 13 and not any(c.isalpha() for c in text)


@lru_cache(maxsize=_CACHED)
def _find(text: str) -> tuple[Span, ...]:
    _read[text] = None
    while len(_read) > _CACHED:
        _read.popitem(last=False)
    if _short(text):
        spans = [*find_amounts(text), *find_pii(text, valid_only=False, types=("phone",))]
        return tuple(_deoverlap([Span(_OLD_TYPES.get(s.type, s.type), s.start, s.end, s.text,
                                      s.score) for s in spans]))
    # every engine reads one window at a time (at most longest_window() characters): pyap2,
    # Presidio's context enhancer and others take time that grows faster than what they read
    return tuple(_deoverlap(find_windowed(_find_window, text)))


def _find_window(text: str) -> list[Span]:
    """Everything found in one window, overlaps resolved."""
    # lazy: the engines (spaCy, Presidio, detect-secrets) load on the first text only
    from ctxleak.sensitive.presidio import find_presidio
    from ctxleak.sensitive.secrets import find_secrets

    found = [_widen(text, s) for s in find_presidio(text)
             if (s.type != "date" or _keep_date(s)) and not _label(text, s)]
    found += [_widen(text, s) for s in find_secrets(text)]
    found += find_emails(text)
    found += find_ibans(text)
    # full dates in words or digits, as value_in reads them (spaCy misses some in a range)
    found += [Span("date", a, b, text[a:b], 0.8) for _, a, b in date_values(text)]
    old = [*find_pii(text, valid_only=False, types=("phone", "address")), *find_amounts(text)]
    # British and Canadian addresses and British phone numbers too (pyap2 reads one country
    # at a time, phonenumbers validates against one default region)
    old += find_pii(text, "GB", types=("phone", "address"))
    old += find_pii(text, "CA", types=("address",))
    found += [Span(_OLD_TYPES.get(s.type, s.type), s.start, s.end, s.text, s.score)
              for s in old]
    found += _whole_names(text)
    found += find_cjk_names(text) + find_spaced_secrets(text)
    return _deoverlap(found)


_TOKEN_END = ".,;:)]}'\"\u201d"
_CAPITALISED_RE = re.compile(r"[A-Z\u00c0-\u00de][a-z\u00df-\u00ff'\u2019\-]{1,40}")
#: the next sentence glued on after a full stop ("Qx7!vR2.The")
_GLUED_RE = re.compile(r"\.[A-Z][a-z]{1,40}(?![\w-])")
#: a word of at most 41 characters and one space right before a name, or right after it
_WORD_BEFORE_RE = re.compile(r"(\S{1,41}) $")
_WORD_AFTER_RE = re.compile(r" (\S{1,41})(?!\S)")
#: capitalised words that are not part of a name next to one
_NOT_NAME = frozenset(
    "The A An This That Please Call Contact Mail Email Send Ship Ask Thanks Thank Dear Hi Hello "
    "Dr Mr Mrs Ms Mx Prof Miss Sir Madam From To For Attn Cc Re Patient Employee Manager Staff "
    "Tenant Client Customer Team Offer Letter Note Memo Reminder Confidential Draft Incident "
    "Following After Before On In At By With And Or Of Our Your Their His Her Its New "
    "Is Are Was Were Be Do Does Did Can Could Should Would Will Has Have Had May Might Must "
    "What Who Whom Whose Which Where When Why How Tell Give Show List Find Get".split())


def _widen(text: str, span: Span) -> Span:
    """A credential grown to its whole token (detect-secrets' JWT pattern stops at a dot); a
    person's name grown by a capitalised word on either side that spaCy's small model left out
    ("Priya" of "Priya Raghunathan")."""
    start, end = span.start, span.end
    if span.type in ("password", "secret"):
        while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "\"'`(=:":
            start -= 1
        while end < len(text) and not text[end].isspace():
            end += 1
        while end > span.end and text[end - 1] in _TOKEN_END:
            end -= 1
        # the next sentence, glued on ("Qx7!vR2.The"): texts joined without spaces read so
        glued = _GLUED_RE.search(text, start, end)
        if glued:
            end = glued.start()
    elif span.type == "person":
        # read near the name only (a slice of the text before it would make this quadratic)
        before = _WORD_BEFORE_RE.search(text, max(0, start - 43), start)
        if before and (before.start(1) == 0 or text[before.start(1) - 1].isspace()) \
                and _CAPITALISED_RE.fullmatch(before.group(1)) \
                and before.group(1) not in _NOT_NAME and not before.group(1).endswith("'s"):
            start = before.start(1)
        after = _WORD_AFTER_RE.match(text, end)
        if after and _CAPITALISED_RE.fullmatch(after.group(1)) \
                and after.group(1) not in _NOT_NAME:
            end = after.end(1)
    if (start, end) == (span.start, span.end):
        return span
    return Span(span.type, start, end, text[start:end], span.score)


def _whole_names(text: str) -> list[Span]:
    """The cued names of :func:`ctxleak.sensitive.detect.find_names`, their words joined where
    only spaces part them ("Ines" "Okafor" -> "Ines Okafor")."""
    out: list[Span] = []
    for span in sorted(find_names(text), key=lambda s: s.start):
        if out and not text[out[-1].end:span.start].strip(" "):
            start = out[-1].start
            out[-1] = Span("person", start, span.end, text[start:span.end], span.score)
        else:
            out.append(Span("person", span.start, span.end, span.text, span.score))
    return out


def find_sensitive(text: str) -> list[Span]:
    """Every secret and piece of personal data in ``text``: sorted by position, not
    overlapping, ``span.text == text[span.start:span.end]``. The detectors read
    :func:`ctxleak.normal_text.normal_text` of ``text`` (NFKC, invisible characters removed);
    their spans are mapped back to ``text``."""
    if len(text) < 3 or not any(c.isalnum() for c in text):
        return []
    return on_normal(lambda normal: list(_find(normal)), text)


def prepare_sensitive(texts: list[str]) -> None:
    """Prepare :func:`find_sensitive`'s coming calls on ``texts``: spaCy reads the windows of
    those not read before in one batch (:func:`ctxleak.sensitive.presidio.prepare_presidio`),
    which costs less than one text at a time. What is found is the same either way."""
    parts = []
    for text in texts:
        if len(text) < 3 or not any(c.isalnum() for c in text):
            continue
        normal = normal_view(text).text
        if normal in _read or _short(normal):
            continue
        parts += [normal[w.start:w.end] for w in windows(normal)]
    if parts:
        from ctxleak.sensitive.presidio import prepare_presidio

        prepare_presidio(parts)


def carried_values(text: str) -> dict[str, str]:
    """The secrets and personal data a document carries, as written in
    :func:`ctxleak.normal_text.normal_text` (whitespace folded) -> type: what an answer would
    repeat (compare with :func:`value_in`). Values under three characters are left out, and
    places (a city named alone is no one's personal data; an address is kept)."""
    found: dict[str, str] = {}
    for span in find_sensitive(text):
        if span.type == "location":
            continue
        value = " ".join(normal_text(span.text).split())
        if len(value) >= 3:
            found.setdefault(value, span.type)
    return found
