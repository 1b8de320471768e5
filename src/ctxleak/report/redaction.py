"""The one redaction path of ``--redact`` (``redact=True``): everything a run shows its reader,
the HTML report (:class:`ctxleak.report.Report`) and the console (``Result.show()``, the CLI),
goes through a :class:`Redactor`.

A Redactor masks, in each text, what the detectors of secrets and personal data find there
(:func:`ctxleak.sensitive.find_sensitive`: Presidio with spaCy's English pipeline for names,
places, ids, PINs and diagnoses; detect-secrets for passwords, keys and tokens; e-mail
addresses, phone numbers, postal addresses, money amounts and dates) and, everywhere, **the
run's values**: one set of the sensitive values found in any text of the run (documents,
contexts, passages, responses, the verdict, the ledger, the summary; :func:`run_values`). A
value is matched whatever whitespace or line breaks it is written with (a key split over two
lines in a document is masked where a response states it whole, and the other way round, and
where a repr writes its line break as ``\\n``), case-folded where that is safe (e-mail
addresses, addresses, diagnoses, names of two words or more, tokens of 8 characters or more).
The words of every person name found in the run are masked wherever they stand alone
(``Employee: Marta Velikova`` found once, ``Velikova`` masked in a response). Token sequences
(leak maps) are masked on their joined text, so a value split across tokens is masked in every
token it spans.

A report view builds the run's Redactor once from its result and makes it the active one
(:func:`redacting`) while it renders the page or prints: :class:`Report` and the console take
the active Redactor, so no table, token map, verdict or line can leave it out; a page given a
``redact`` of its own while a run's Redactor is active extends that one (:meth:`Redactor.adding`)
rather than starting afresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any

from ctxleak.report.value_matcher import ValueMatcher

REDACTED = "[REDACTED]"


def _pattern_spans(text: str, patterns: bool | Iterable[str | re.Pattern[str]],
                   names: Iterable[str] = ()) -> list[tuple[int, int]]:
    if patterns is False or patterns is None:
        return []
    spans: list[tuple[int, int]] = []
    if patterns is True:
        # lazy: the detectors (spaCy, Presidio, detect-secrets) load only when something is
        # redacted
        from ctxleak.sensitive.detect import find_names

        names = tuple(names)
        found = [(s.start, s.end) for s in _sensitive(text)]
        return found + [(s.start, s.end) for s in find_names(text, names)] if names else found
    for p in patterns:
        rx = re.compile(p) if isinstance(p, str) else p
        spans += [m.span() for m in rx.finditer(text) if m.end() > m.start()]
    return spans


def redaction_spans(text: str, spans: Sequence[tuple[int, int]] | None = None,
                    patterns: bool | Iterable[str | re.Pattern[str]] = True,
                    names: Iterable[str] = (), values: Iterable[str] = ()
                    ) -> list[tuple[int, int]]:
    """The sorted, merged ``[start, end)`` character spans that :func:`redact_text` would mask."""
    from ctxleak.sensitive.detect import merge_spans

    found = list(_pattern_spans(text, patterns, names))
    values = tuple(values)
    if values:
        found += ValueMatcher(values).spans(text)
    for span in spans or ():
        start, end = int(span[0]), int(span[1])
        if not 0 <= start <= end <= len(text):
            raise ValueError(f"redaction span {span!r} is outside the text (length {len(text)})")
        found.append((start, end))
    return merge_spans(found)


def redact_text(text: str, spans: Sequence[tuple[int, int]] | None = None,
                patterns: bool | Iterable[str | re.Pattern[str]] = True,
                names: Iterable[str] = (), values: Iterable[str] = ()) -> str:
    """Replace PII in ``text`` by ``[REDACTED]``.

    ``spans`` are extra ``(start, end)`` character offsets into ``text`` to mask (e.g. the known
    PII of a probing record). ``patterns=True`` also masks what
    :func:`ctxleak.sensitive.find_sensitive` finds (passwords, keys, tokens, PINs, ids,
    names, addresses, places, e-mail addresses, phone numbers, money amounts, dates, diagnoses)
    and every word of ``names``. ``False`` masks only the spans; an iterable of regexes masks
    their matches instead of the detectors'. ``values`` (a run's, :func:`run_values`) are
    masked wherever they appear, whatever the whitespace or line breaks they are written with.
    Overlapping or touching regions become a single ``[REDACTED]``.
    """
    out, pos = [], 0
    for start, end in redaction_spans(text, spans, patterns, names, values):
        out += [text[pos:start], REDACTED]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_tokens(tokens: Sequence[str], names: Iterable[str] = (),
                  values: Iterable[str] = ()) -> list[str]:
    """Mask tokens that overlap PII in their joined text: the first token of each masked region
    shows ``[REDACTED]``, the rest of the region is emptied (the token count is kept), so a name
    or an amount split across tokens is masked in every token it spans."""
    tokens = [str(t) for t in tokens]
    return _mask_tokens(tokens, redaction_spans("".join(tokens), names=names, values=values))


def _mask_tokens(tokens: list[str], regions: Sequence[tuple[int, int]]) -> list[str]:
    """The tokens with those overlapping ``regions`` of their joined text masked (the first of
    a region ``[REDACTED]``, the rest emptied)."""
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


# --------------------------------------------------------------------------- the run's values

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
#: with its cue in a document, repeated without one in an answer): they are also "names"
_TOKEN_TYPES = frozenset({"password", "secret", "pin", "id", "email"})
#: types whose values, found once, are masked wherever they appear (whole values); places are
#: left to each text's own detection (a city named alone is no one's personal data), and so are
#: a person's single words a model finds (``Verdict``, ``Config``: too often a mistake)
_RUN_TYPES = frozenset({*_TOKEN_TYPES, "phone", "address", "money", "date", "medical", "person"})
#: credentials whose pieces, parted only by whitespace (a key split over two lines), are one value
_JOINED_TYPES = frozenset({"password", "secret", "pin", "id"})
#: types whose values are matched case-folded (a name of two words or more: person)
_FOLDED_TYPES = frozenset({"email", "address", "medical", "person"})
_LATIN_MAX = "\u024f"  # letters above: scripts other than Latin (Cyrillic, Greek, ...)
_NEXT_WORD_RE = re.compile(r" ([^\s,.;:!?()\"]+)")
_POSSESSIVE_RE = re.compile(r"['\u2019]s$")


def _name_word(word: str) -> bool:
    """A capitalised word of a name in any script (``Марта``, ``Fenwick-Oduya``, ``Lucía``)."""
    word = _POSSESSIVE_RE.sub("", word)
    parts = word.split("-")
    return all(len(p) >= 2 and p.isalpha() and p[0].isupper() and p[1:].islower() for p in parts)


def _other_script(word: str) -> bool:
    return _name_word(word) and any(c > _LATIN_MAX for c in word)


def _widen_name(text: str, start: int, end: int) -> tuple[int, int]:
    """A person's name grown by the capitalised words of other scripts than Latin beside it
    ("Иван" of "Иван Петров"; spaCy's English model finds the last word only, and
    :mod:`ctxleak.sensitive` grows names by Latin words)."""
    while start >= 2 and text[start - 1] == " ":
        first = start - 1
        while first > 0 and not text[first - 1].isspace() and start - first <= 64:
            first -= 1
        if first == start - 1 or not _other_script(text[first:start - 1]):
            break
        start = first
    while (after := _NEXT_WORD_RE.match(text, end)) and _other_script(after.group(1)):
        end = after.end(1)
    return start, end


#: The longest text whose detections :func:`_sensitive` keeps (at most 4,096 of them: up to
#: about 80 MB of kept text, where answers may be up to 1,000,000 characters each).
CACHED_TEXT = 20_000


def _sensitive(text: str) -> tuple[Any, ...]:
    """:func:`ctxleak.sensitive.find_sensitive` with names of other scripts than Latin grown to
    their whole (:func:`_widen_name`). Kept per text up to :data:`CACHED_TEXT` characters: a
    run's report, its console summary and its pages each ask the same texts again (the
    detectors are a function of the text alone), and Presidio's pass over a text costs
    milliseconds to seconds."""
    return _sensitive_kept(text) if len(text) <= CACHED_TEXT else _sensitive_found(text)


def _sensitive_found(text: str) -> tuple[Any, ...]:
    from ctxleak.sensitive import find_sensitive
    from ctxleak.sensitive.detect import Span

    out = []
    for s in find_sensitive(text):
        if s.type == "person":
            start, end = _widen_name(text, s.start, s.end)
            if (start, end) != (s.start, s.end):
                s = Span(s.type, start, end, text[start:end], s.score)
        out.append(s)
    return tuple(out)


_sensitive_kept = lru_cache(maxsize=4096)(_sensitive_found)


def _person(value: str) -> bool:
    """A person's name a model found that is masked wherever it appears: two or three
    capitalised words (any script), a possessive allowed at the end ("Martin Luther King Jr.
    Day" is not one)."""
    words = value.split()
    return 2 <= len(words) <= 3 and all(_name_word(w) for w in words)


def _kept(value: str, kind: str) -> bool:
    """Whether a value of type ``kind`` found once is masked wherever it appears."""
    key = "".join(value.split())
    if kind not in _RUN_TYPES or len(key) < 4:
        return False
    if kind == "person":
        return _person(value)
    if kind in ("money", "date"):  # a bare number is too often another number ("950 tokens")
        return any(c.isalpha() or not (c.isdigit() or c in ".,'-/:") for c in key) \
            or (kind == "date" and len(key) >= 8) or (kind == "money" and len(key) >= 5)
    return True


def run_values(*values: Any) -> dict[str, str]:
    """The sensitive values found in any text of ``values`` (records, summaries, verdicts:
    every string, and every list of strings joined), whitespace folded -> their type: what
    :func:`ctxleak.sensitive.find_sensitive` finds in every text of two words or more (or one
    long token), but places and single words it takes for a person; the names found after a
    cue (:func:`ctxleak.sensitive.detect.find_names`, by word); and a credential's pieces
    parted only by whitespace or a line break, joined (a key split over two lines)."""
    # lazy: only when redacting
    from ctxleak.sensitive import prepare_sensitive
    from ctxleak.sensitive.detect import find_names, find_pii

    found: dict[str, str] = {}
    texts = list(dict.fromkeys(t for v in values for t in _texts(v)))
    # the texts the detectors will read, read by spaCy in one batch
    prepare_sensitive([t for t in texts if len(t) >= 8 and not (len(t.split()) < 2 and len(t) < 16)])
    for text in texts:
        for span in find_names(text):
            found.setdefault(span.text, "person")
        if len(text) < 8:
            continue
        if len(text.split()) < 2 and len(text) < 16:
            # a single token holds no name a model could find, and there are many: only the
            # pattern detectors of phone numbers and e-mail addresses read it
            for s in find_pii(text, valid_only=False, types=("email", "phone")):
                found.setdefault(" ".join(s.text.split()), s.type)
            continue
        spans = _sensitive(text)
        for s in spans:
            value = " ".join(_POSSESSIVE_RE.sub("", s.text).split()) if s.type == "person" \
                else " ".join(s.text.split())
            if _kept(value, s.type):
                found.setdefault(value, s.type)
        group: list[Any] = []  # credentials parted by whitespace only
        for s in [*spans, None]:
            joinable = s is not None and s.type in _JOINED_TYPES
            if joinable and group and not text[group[-1].end:s.start].strip():
                group.append(s)
                continue
            if len(group) > 1:
                whole = text[group[0].start:group[-1].end]
                found.setdefault(" ".join(whole.split()), group[0].type)
            group = [s] if joinable else []
    return found


def _names_of(found: Mapping[str, str]) -> set[str]:
    """Of a run's values, those whose words are masked wherever they stand alone: person names
    and single-token secrets, PINs, ids and e-mail addresses."""
    return {v for v, kind in found.items()
            if kind == "person" or (kind in _TOKEN_TYPES and " " not in v)}


def names_in(*values: Any) -> set[str]:
    """The person names found in any text of ``values`` (records, summaries: every string, and
    every list of strings joined), and the single-token secrets, PINs, ids and e-mail addresses
    found there (:func:`run_values`): masked, word by word, wherever they appear."""
    return _names_of(run_values(*values))


# --------------------------------------------------------------------------- matching values

# --------------------------------------------------------------------------- the Redactor

@dataclass(frozen=True)
class Redactor:
    """What a run shows passes through :meth:`text` (and token sequences through
    :meth:`tokens`): masked when ``on``, as they are otherwise. ``names``: person names and
    single-token secrets known beforehand, masked wherever their words appear; ``values``: the
    run's values (:func:`run_values`; ``folded``, those matched case-folded), masked wherever
    they appear, whatever the whitespace they are written with. ``detect``: also mask what the
    detectors find in each text shown; off for a run's Redactor, which masks the values found in
    the run's own texts and never ctxleak's words around them (the detectors take "Def." or
    "≥" for a person)."""

    on: bool = False
    names: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    folded: frozenset[str] = field(default=frozenset())
    detect: bool = True

    @classmethod
    def of_run(cls, on: bool, *values: Any) -> Redactor:
        """The Redactor of a run: on or off, with the values found in any text of its
        ``values`` (records, summary, verdict, ...)."""
        if not on:
            return cls()
        return cls(True).adding_found(run_values(*values))

    def adding(self, names: Iterable[str] = (), values: Iterable[str] = ()) -> Redactor:
        """This Redactor with more ``names`` (masked word by word) and ``values`` (masked
        whole; both, for instance, a probe's subjects)."""
        names = [n for n in names if n and n.strip()]
        values = [" ".join(v.split()) for v in values if v and v.strip()]
        return replace(self, names=tuple(sorted({*self.names, *names})),
                       values=tuple(sorted({*self.values, *values})))

    def adding_found(self, found: Mapping[str, str]) -> Redactor:
        """This Redactor with the values of :func:`run_values` (their types say which are
        names and which are matched case-folded)."""
        folded = {v for v, kind in found.items()
                  if (kind in _FOLDED_TYPES and (kind != "person" or " " in v))
                  or (kind != "person" and len("".join(v.split())) >= 8)}
        out = self.adding(_names_of(found), found)
        return replace(out, folded=self.folded | frozenset(folded))

    @cached_property
    def _values(self) -> ValueMatcher:
        return ValueMatcher(self.values, self.folded)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The merged spans :meth:`text` masks in ``text`` (none when off)."""
        from ctxleak.sensitive.detect import merge_spans

        if not self.on or not text:
            return []
        if self.detect:
            found = _pattern_spans(text, True, self.names)
        else:
            from ctxleak.sensitive.detect import find_names

            found = [(s.start, s.end) for s in find_names(text, self.names)] if self.names else []
        return merge_spans(found + self._values.spans(text))

    def text(self, value: Any) -> str:
        """``value`` as a string, its PII masked when on."""
        s = str(value)
        if not self.on or not s:
            return s
        return redact_text(s, spans=self.spans(s), patterns=False)

    def tokens(self, tokens: Sequence[str]) -> list[str]:
        """The tokens as shown: masked on their joined text when on (the first token of each
        masked region shows ``[REDACTED]``, the rest are emptied; the count is kept)."""
        tokens = [str(t) for t in tokens]
        return _mask_tokens(tokens, self.spans("".join(tokens))) if self.on else tokens


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


def redactor_for(redact: bool | None, *values: Any, names: Iterable[str] = (),
                 extra: Iterable[str] = ()) -> Redactor:
    """The Redactor of a page asked to ``redact`` (None: the active one, as it is): the active
    run's Redactor when one is active, else one built from ``values`` (:meth:`Redactor.of_run`);
    with ``names`` and ``extra`` values added. ``False``: none."""
    if redact is None:
        return active()
    if not redact:
        return OFF
    base = active() if active().on else Redactor.of_run(True, *values)
    return base.adding(names, extra) if names or extra else base


__all__ = ["OFF", "REDACTED", "Redactor", "active", "names_in", "redact_text", "redact_tokens",
           "redacting", "redaction_spans", "redactor_for", "run_values"]
