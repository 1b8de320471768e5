"""Secrets and personal data in a text, found by libraries made for it, and compared across
formats: what a RAG audit reports as copied and what ``--redact`` masks.

- Presidio (Microsoft's PII analyzer) with spaCy's English pipeline finds names and places, and,
  through recognizers written for it here, ids, PINs, prose passwords and diagnoses
  (:mod:`.presidio`);
- detect-secrets (Yelp's credential scanner) finds passwords, keys and tokens (:mod:`.secrets`);
- phonenumbers, pyap2 and ctxleak's own patterns (:mod:`ctxleak.sensitive.detect`) find phone
  numbers, postal addresses, e-mail addresses, money amounts and cued names, as before;
- money, dates and numbers are compared across formats (:func:`value_in`, :mod:`.values`).

Types: ``person``, ``address``, ``location``, ``email``, ``phone``, ``id``, ``password``,
``secret``, ``pin``, ``money``, ``date``, ``medical``. Overlapping finds are resolved by type
(credentials first, then contact details and addresses, places last), then by length. The
engines load on first use, once per process (importing this module loads none of them); results
are cached per text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ctxleak.sensitive.detect import Span, find_amounts, find_emails, find_names, find_pii
from ctxleak.sensitive.values import date_values, value_in

__all__ = ["SENSITIVE_TYPES", "carried_values", "find_sensitive", "value_in"]

#: every type :func:`find_sensitive` gives, most important first (the order overlaps resolve in)
SENSITIVE_TYPES = ("password", "secret", "pin", "email", "phone", "address", "id", "money",
                   "medical", "person", "date", "location")
_RANK = {t: i for i, t in enumerate(SENSITIVE_TYPES)}
_OLD_TYPES = {"name": "person", "amount": "money"}
_MONTH_RE = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b",
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
    kept: list[Span] = []
    for span in sorted(spans, key=lambda s: (_RANK.get(s.type, 99), -(s.end - s.start),
                                             s.start)):
        if all(span.end <= k.start or span.start >= k.end for k in kept):
            kept.append(span)
    return sorted(kept, key=lambda s: (s.start, s.end))


@lru_cache(maxsize=8192)
def _find(text: str) -> tuple[Span, ...]:
    # lazy: the engines (spaCy, Presidio, detect-secrets) load on the first text only
    from ctxleak.sensitive.presidio import find_presidio
    from ctxleak.sensitive.secrets import find_secrets

    if len(text) < 13 and not any(c.isalpha() for c in text):  # a number, a table cell
        spans = [*find_amounts(text), *find_pii(text, valid_only=False, types=("phone",))]
        return tuple(_deoverlap([Span(_OLD_TYPES.get(s.type, s.type), s.start, s.end, s.text,
                                      s.score) for s in spans]))
    found = [_widen(text, s) for s in find_presidio(text)
             if (s.type != "date" or _keep_date(s)) and not _label(text, s)]
    found += [_widen(text, s) for s in find_secrets(text)]
    found += find_emails(text)
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
    return tuple(_deoverlap(found))


_TOKEN_END = ".,;:)]}'\"\u201d"
_CAPITALISED_RE = re.compile(r"[A-Z\u00c0-\u00de][a-z\u00df-\u00ff'\u2019\-]+")
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
        glued = re.search(r"\.[A-Z][a-z]+(?![\w-])", text[start:end])
        if glued:
            end = start + glued.start()
    elif span.type == "person":
        before = re.search(r"([^\s]+) $", text[:start])
        if before and _CAPITALISED_RE.fullmatch(before.group(1)) \
                and before.group(1) not in _NOT_NAME and not before.group(1).endswith("'s"):
            start = before.start(1)
        after = re.match(r" ([^\s]+)", text[end:])
        if after and _CAPITALISED_RE.fullmatch(after.group(1)) \
                and after.group(1) not in _NOT_NAME:
            end += after.end(1)
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
    overlapping, ``span.text == text[span.start:span.end]``."""
    if len(text) < 3 or not any(c.isalnum() for c in text):
        return []
    return list(_find(text))


def carried_values(text: str) -> dict[str, str]:
    """The secrets and personal data a document carries, as written (whitespace folded) ->
    type: what an answer would repeat (compare with :func:`value_in`). Values under three
    characters are left out, and places (a city named alone is no one's personal data; an
    address is kept)."""
    found: dict[str, str] = {}
    for span in find_sensitive(text):
        if span.type == "location":
            continue
        value = " ".join(span.text.split())
        if len(value) >= 3:
            found.setdefault(value, span.type)
    return found
