"""The one normalisation of text that every detector of secrets and personal data and every
matcher of copied text reads through, so that a leak is the same leak in any code points.

:func:`normal_text` is Unicode NFKC ("Unicode Standard Annex #15: Unicode Normalization
Forms": compatibility composition, so ``e`` + U+0301 is ``é`` and a full-width ``１`` is ``1``)
with the characters that show as nothing removed (:func:`is_invisible`): every format character
(general category Cf: zero-width space, non-joiner and joiner, word joiner, soft hyphen U+00AD,
the bidirectional embeddings, overrides and isolates, the byte-order mark, invisible operators,
tag characters), the variation selectors, the combining grapheme joiner and the Hangul fillers.

Finds are reported on the text as given: :func:`normal_view` keeps, for each character of the
normal text, the span of the given text it came from, and :meth:`NormalView.span` maps a span of
the normal text back (a zero-width character inside a find is inside its span). Pure standard
library: every layer of ctxleak may use it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["NormalView", "is_invisible", "normal_text", "normal_view"]

#: Blocks that hold every format character (Cf) of Unicode 15 and the other invisibles; only
#: these are scanned when the module loads (a few milliseconds, not the whole code space).
_BLOCKS = ((0x0000, 0x3200), (0xFE00, 0x10000), (0x11000, 0x14000), (0x1BC00, 0x1BD00),
           (0x1D100, 0x1D200), (0xE0000, 0xE0200))
#: Invisible characters outside category Cf: the combining grapheme joiner, the Hangul fillers,
#: the Mongolian and the standard variation selectors (supplementary ones are in _BLOCKS).
_EXTRA = frozenset([0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x180B, 0x180C, 0x180D, 0x180F,
                    *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
_INVISIBLE = frozenset(cp for lo, hi in _BLOCKS for cp in range(lo, hi)
                       if unicodedata.category(chr(cp)) == "Cf") | _EXTRA
_INVISIBLE_RE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in sorted(_INVISIBLE)) + "]")
_DROP = dict.fromkeys(_INVISIBLE)


def is_invisible(char: str) -> bool:
    """Whether ``char`` shows as nothing (module docstring): removed by :func:`normal_text`."""
    return ord(char) in _INVISIBLE


def _plain(text: str) -> bool:
    """Whether :func:`normal_text` leaves ``text`` as it is (checked without copying it)."""
    return text.isascii() or (unicodedata.is_normalized("NFKC", text)
                              and _INVISIBLE_RE.search(text) is None)


def normal_text(text: str) -> str:
    """``text`` in NFKC with its invisible characters removed (module docstring)."""
    if _plain(text):
        return text
    return unicodedata.normalize("NFKC", text.translate(_DROP)).translate(_DROP)


@dataclass(frozen=True)
class NormalView:
    """:func:`normal_text` of a text, and where each of its characters came from: character
    ``i`` of :attr:`text` is from ``source[starts[i]:ends[i]]`` (None: the text is unchanged)."""

    text: str
    starts: tuple[int, ...] | None = None
    ends: tuple[int, ...] | None = None

    @property
    def unchanged(self) -> bool:
        return self.starts is None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the given text that ``text[start:end]`` came from (an empty span maps to
        an empty span where it stands)."""
        if self.starts is None or self.ends is None:
            return start, end
        n = len(self.starts)
        if start >= end:
            at = self.starts[start] if start < n else (self.ends[-1] if n else 0)
            return at, at
        return self.starts[start], self.ends[end - 1]


def _joins(cluster: str, char: str) -> bool:
    """Whether ``char`` may compose with the cluster before it under NFKC: a combining mark,
    or a starter that composes (a Hangul vowel or final after its syllable, an Indic vowel
    sign's second part)."""
    if unicodedata.combining(char):
        return True
    pair = unicodedata.normalize("NFKC", cluster + char)
    return pair != unicodedata.normalize("NFKC", cluster) + unicodedata.normalize("NFKC", char)


def normal_view(text: str) -> NormalView:
    """:func:`normal_text` of ``text`` with the origin of each of its characters: the text is
    read in clusters (a character and the marks that compose with it, invisible characters
    skipped), each normalised alone; linear in the text's length."""
    if _plain(text):
        return NormalView(text)
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    first = last = -1

    def cluster() -> str:
        return "".join(c for c in text[first:last + 1] if ord(c) not in _INVISIBLE)

    def flush() -> None:
        piece = unicodedata.normalize("NFKC", cluster()).translate(_DROP)
        out.append(piece)
        starts.extend([first] * len(piece))
        ends.extend([last + 1] * len(piece))

    for k, char in enumerate(text):
        if ord(char) in _INVISIBLE:
            continue
        if first >= 0 and (char.isascii() or not _joins(cluster(), char)):
            flush()
            first = -1
        if first < 0:
            first = k
        last = k
    if first >= 0:
        flush()
    return NormalView("".join(out), tuple(starts), tuple(ends))
