"""The one redaction path of ``--redact`` (``redact=True``): everything a run shows its reader,
the HTML report (:class:`ctxleak.report.Report`) and the console (``Result.show()``, the CLI),
goes through a :class:`Redactor`.

A Redactor masks what the detectors of secrets and personal data find in each text
(:func:`ctxleak.sensitive.find_sensitive`: Presidio with spaCy's English pipeline for
names, places, ids, PINs and diagnoses; detect-secrets for passwords, keys and tokens; e-mail
addresses, phone numbers, postal addresses, money amounts and dates) and, everywhere, the words
of every name found anywhere in the run's texts (:func:`names_in`): a name found once
(``Employee: Marta Velikova``) is masked also where nothing marks it, at the start of a passage,
in a response, or split across passages. Token sequences (leak maps) are masked on their joined
text, so a name split across tokens is masked in every token it spans.

A report view builds the run's Redactor once from its result and makes it the active one
(:func:`redacting`) while it renders the page or prints: :class:`Report` and the console take
the active Redactor, so no table, token map, verdict or line can leave it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

REDACTED = "[REDACTED]"


def _pattern_spans(text: str, patterns: bool | Iterable[str | re.Pattern[str]],
                   names: Iterable[str] = ()) -> list[tuple[int, int]]:
    if patterns is False or patterns is None:
        return []
    spans: list[tuple[int, int]] = []
    if patterns is True:
        # lazy: the detectors (spaCy, Presidio, detect-secrets) load only when something is
        # redacted
        from ctxleak.sensitive import find_sensitive
        from ctxleak.sensitive.detect import find_names

        names = tuple(names)
        found = [(s.start, s.end) for s in find_sensitive(text)]
        return found + [(s.start, s.end) for s in find_names(text, names)] if names else found
    for p in patterns:
        rx = re.compile(p) if isinstance(p, str) else p
        spans += [m.span() for m in rx.finditer(text) if m.end() > m.start()]
    return spans


def redaction_spans(text: str, spans: Sequence[tuple[int, int]] | None = None,
                    patterns: bool | Iterable[str | re.Pattern[str]] = True,
                    names: Iterable[str] = ()) -> list[tuple[int, int]]:
    """The sorted, merged ``[start, end)`` character spans that :func:`redact_text` would mask."""
    from ctxleak.sensitive.detect import merge_spans

    found = list(_pattern_spans(text, patterns, names))
    for span in spans or ():
        start, end = int(span[0]), int(span[1])
        if not 0 <= start <= end <= len(text):
            raise ValueError(f"redaction span {span!r} is outside the text (length {len(text)})")
        found.append((start, end))
    return merge_spans(found)


def redact_text(text: str, spans: Sequence[tuple[int, int]] | None = None,
                patterns: bool | Iterable[str | re.Pattern[str]] = True,
                names: Iterable[str] = ()) -> str:
    """Replace PII in ``text`` by ``[REDACTED]``.

    ``spans`` are extra ``(start, end)`` character offsets into ``text`` to mask (e.g. the known
    PII of a probing record). ``patterns=True`` also masks what
    :func:`ctxleak.sensitive.find_sensitive` finds (passwords, keys, tokens, PINs, ids,
    names, addresses, places, e-mail addresses, phone numbers, money amounts, dates, diagnoses)
    and every word of ``names``. ``False`` masks only the spans; an iterable of regexes masks
    their matches instead of the detectors'. Overlapping or touching regions become a single
    ``[REDACTED]``.
    """
    out, pos = [], 0
    for start, end in redaction_spans(text, spans, patterns, names):
        out += [text[pos:start], REDACTED]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_tokens(tokens: Sequence[str], names: Iterable[str] = ()) -> list[str]:
    """Mask tokens that overlap PII in their joined text: the first token of each masked region
    shows ``[REDACTED]``, the rest of the region is emptied (the token count is kept), so a name
    or an amount split across tokens is masked in every token it spans."""
    tokens = [str(t) for t in tokens]
    regions = redaction_spans("".join(tokens), names=names)
    out, pos, r, last_region = [], 0, 0, -1
    for tok in tokens:
        start, end = pos, pos + len(tok)
        pos = end
        while r < len(regions) and regions[r][1] <= start:
            r += 1
        if r < len(regions) and regions[r][0] < end and end > start:
            out.append("" if r == last_region else REDACTED)
            last_region = r
        else:
            out.append(tok)
    return out


def _texts(value: Any) -> Iterator[str]:
    """Every string in a nested value (dict values, list items), and each list of strings
    joined (token strings, passages: a name split across them is seen whole)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, Sequence) and not isinstance(value, bytes):  # a run's rows too
        if value and all(isinstance(v, str) for v in value):
            yield "".join(value)
            yield "\n\n".join(value)
        for v in value:
            yield from _texts(v)


#: types of single-token values that are masked wherever they appear once found in a run (a PIN
#: with its cue in a document, repeated without one in an answer)
_TOKEN_TYPES = frozenset({"password", "secret", "pin", "id", "email"})
#: a person's name as a model finds it, masked wherever its words appear: two or three
#: capitalised words, a possessive allowed at the end
_NAME_RE = re.compile(r"[A-Z][a-z\u00e0-\u00ff]+(?:-[A-Z][a-z\u00e0-\u00ff]+)?"
                      r"(?: [A-Z][a-z\u00e0-\u00ff]+(?:-[A-Z][a-z\u00e0-\u00ff]+)?){1,2}"
                      r"(?:['\u2019]s)?")


def names_in(*values: Any) -> set[str]:
    """The person names found in any text of ``values`` (records, summaries: every string, and
    every list of strings joined), and the single-token secrets, PINs, ids and e-mail addresses
    found there: by :func:`ctxleak.sensitive.detect.find_names` in every text, and by
    :func:`ctxleak.sensitive.find_sensitive` in those of two words or more (a single
    token holds no name a model could find, and there are many of them)."""
    # lazy: only when redacting
    from ctxleak.sensitive import find_sensitive
    from ctxleak.sensitive.detect import find_names

    names: set[str] = set()
    for text in dict.fromkeys(t for v in values for t in _texts(v)):
        names.update(span.text for span in find_names(text))
        if len(text) >= 8 and len(text.split()) >= 2:
            for s in find_sensitive(text):
                # a model's name of one word ("Verdict"), or of words that are not all
                # names ("Martin Luther King Jr. Day"), is too often a mistake to mask
                # everywhere
                if s.type == "person" and _NAME_RE.fullmatch(s.text):
                    names.add(re.sub(r"['\u2019]s$", "", s.text))
                elif s.type in _TOKEN_TYPES and len(s.text) >= 4 and " " not in s.text:
                    names.add(s.text)
    return names


@dataclass(frozen=True)
class Redactor:
    """What a run shows passes through :meth:`text` (and token sequences through
    :meth:`tokens`): masked when ``on``, as they are otherwise. ``names``: person names and
    single-token secrets known beforehand (found anywhere in the run, :func:`names_in`), masked
    wherever their words appear."""

    on: bool = False
    names: tuple[str, ...] = ()

    @classmethod
    def of_run(cls, on: bool, *values: Any) -> Redactor:
        """The Redactor of a run: on or off, with the names found in its ``values``."""
        return cls(True, tuple(sorted(names_in(*values)))) if on else cls()

    def text(self, value: Any) -> str:
        """``value`` as a string, its PII masked when on."""
        s = str(value)
        return redact_text(s, names=self.names) if self.on and s else s

    def tokens(self, tokens: Sequence[str]) -> list[str]:
        """The tokens as shown: :func:`redact_tokens` when on (the count is kept)."""
        return redact_tokens(tokens, self.names) if self.on else [str(t) for t in tokens]


OFF = Redactor()
_ACTIVE: ContextVar[Redactor] = ContextVar("ctxleak_redactor", default=OFF)


@contextmanager
def redacting(redactor: Redactor) -> Iterator[Redactor]:
    """Within the block, reports built without an explicit ``redact`` and everything the
    console prints go through ``redactor``."""
    token = _ACTIVE.set(redactor)
    try:
        yield redactor
    finally:
        _ACTIVE.reset(token)


def active() -> Redactor:
    """The Redactor of the run being shown (:data:`OFF` outside :func:`redacting`)."""
    return _ACTIVE.get()


__all__ = ["OFF", "REDACTED", "Redactor", "active", "names_in", "redact_text", "redact_tokens",
           "redacting", "redaction_spans"]
