"""The run's known values found in a text whatever whitespace, line breaks or a repr's ``\\n``
part their characters, and in any code points (:func:`ctxleak.normal_text.normal_text`)
(:class:`ValueMatcher`), for ``--redact``'s one set of values
(:mod:`ctxleak.report.redaction`). Hand-written: a regex per value with optional gaps between
every character would backtrack; the text is squeezed once and each value found in it."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ctxleak.normal_text import normal_text, normal_view

_GAP_RE = re.compile(r"\s+|\\[nrt]")  # whitespace, and a line break as a repr writes it


def _word_char(c: str) -> bool:
    return c.isalnum() or c in "_-"


def _fold(text: str) -> str:
    """Lower case of the same length (a character whose lower case is longer stays)."""
    low = text.lower()
    return low if len(low) == len(text) else "".join(
        c.lower() if len(c.lower()) == 1 else c for c in text)


@dataclass(frozen=True)
class _Key:
    """A value as it is looked for: without whitespace (folded or not), and whether its first
    and last characters must not continue a word."""

    text: str
    folded: bool
    word_start: bool
    word_end: bool


class ValueMatcher:
    """Finds the run's values in a text, whatever whitespace (or ``\\n``) parts their
    characters: the text without whitespace is searched, and the finds mapped back."""

    def __init__(self, values: Iterable[str], folded: Iterable[str] = ()) -> None:
        fold = set(folded)
        keys = {}
        for value in values:
            key = "".join(_GAP_RE.sub(" ", normal_text(value)).split())
            if len(key) < 2:
                continue
            is_folded = value in fold
            k = _Key(_fold(key) if is_folded else key, is_folded, _word_char(key[0]),
                     _word_char(key[-1]))
            keys[(k.text, k.folded)] = k
        self.keys = sorted(keys.values(), key=lambda k: -len(k.text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the values stand in ``text``, read in
        :func:`ctxleak.normal_text.normal_text` (NFKC, invisible characters removed) and mapped
        back: a value written with zero-width characters between its letters is found."""
        if not self.keys or not text:
            return []
        view = normal_view(text)
        return [view.span(a, b) for a, b in self._spans(view.text)]

    def _spans(self, text: str) -> list[tuple[int, int]]:
        # the kept characters: where each piece between gaps starts in the text and in the
        # squeezed text
        starts, squeezed_starts, pieces, pos, n = [], [], [], 0, 0
        gaps = [(m.start(), m.end()) for m in _GAP_RE.finditer(text)] + [(len(text), len(text))]
        for a, b in gaps:
            if a > pos:
                starts.append(pos)
                squeezed_starts.append(n)
                pieces.append(text[pos:a])
                n += a - pos
            pos = b
        squeezed = "".join(pieces)
        folded = _fold(squeezed) if any(k.folded for k in self.keys) else squeezed

        def continues(start: int) -> bool:  # a word goes on before ``start`` (not a "\\n")
            return start > 0 and _word_char(text[start - 1]) and not (
                start >= 2 and text[start - 2] == "\\" and text[start - 1] in "nrt")

        def original(i: int) -> int:
            j = bisect.bisect_right(squeezed_starts, i) - 1
            return starts[j] + i - squeezed_starts[j]

        found = []
        for k in self.keys:
            hay = folded if k.folded else squeezed
            i = hay.find(k.text)
            while i >= 0:
                start, end = original(i), original(i + len(k.text) - 1) + 1
                if not (k.word_start and continues(start)) \
                        and not (k.word_end and end < len(text) and _word_char(text[end])):
                    found.append((start, end))
                i = hay.find(k.text, i + 1)
        return found


__all__ = ["ValueMatcher"]
