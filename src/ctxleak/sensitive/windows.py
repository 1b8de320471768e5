"""Long texts read in windows of bounded size, so that detection stays linear in the text's
length.

Some engines the detectors use take time that grows faster than the text: pyap2's address
patterns backtrack over every digit and space (``"1 1 1 ..."``: about 2 s for 2,000 characters,
8 s for 4,000), Presidio's context enhancer looks up every find's token from the first token of
the text, and spaCy, phonenumbers' matcher and detect-secrets read a text whole. None of them
can be told to stop, so none is handed more than a window: the text is cut, at a line break or
a space where there is one near, into parts of about ``size`` characters that each *own*; each
window adds ``margin`` characters of the text on either side of its part, so that a value (and
the cue before it, ``password is ...``) of up to ``margin`` characters that starts in the part
is seen whole. A find is kept from the window that owns its start: a value that straddles a
cut is found once, by the window before the cut (the window after sees it too, whole, in its
left margin, and leaves it).

The cost is then (text length / size) windows of at most ``size + 2 * margin`` characters each
(plus :data:`SNAP` where a cut moves to a space): linear in the text's length, whatever the
engines do inside a window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, cast


class _Found(Protocol):
    """A find: a dataclass with its offsets and text (detect.py's ``Span``, which imports this
    module, so it is not named here)."""

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


Found = TypeVar("Found", bound=_Found)

__all__ = ["MARGIN", "SIZE", "SNAP", "Window", "find_windowed", "longest_window", "windows"]

#: characters each window owns (a text at most ``SIZE + 2 * MARGIN`` long is one window)
SIZE = 1000
#: characters of context on each side of a window's own part: the longest value found whole
MARGIN = 200
#: how far a cut or a window's edge moves back to fall after a line break or a space
SNAP = 100


@dataclass(frozen=True)
class Window:
    """``text[start:end]`` is handed to the engines; finds starting in ``[own_start, own_end)``
    are this window's."""

    start: int
    end: int
    own_start: int
    own_end: int


def _snap(text: str, pos: int, lowest: int) -> int:
    """``pos`` moved back (to no lower than ``lowest``, and at most :data:`SNAP` characters) to
    just after a line break, else just after a space; ``pos`` itself where neither is near."""
    lo = max(lowest, pos - SNAP, 0)
    if pos <= 0 or pos >= len(text):
        return max(0, min(pos, len(text)))
    newline = text.rfind("\n", lo, pos)
    if newline >= 0:
        return newline + 1
    return next((i for i in range(pos, lo, -1) if text[i - 1].isspace()), pos)


def windows(text: str, size: int = SIZE, margin: int = MARGIN) -> list[Window]:
    """The windows that cover ``text``: one when it is at most ``size + 2 * margin`` long; else
    own parts of ``size - SNAP`` to ``size`` characters, each window at most
    ``size + 2 * margin + SNAP`` long."""
    if size <= SNAP or margin < 0:
        raise ValueError(f"a window owns more than {SNAP} characters (size={size}) and has a "
                         f"margin of 0 or more (margin={margin})")
    n = len(text)
    if n <= size + 2 * margin:
        return [Window(0, n, 0, n)]
    cuts = [0]
    while n - cuts[-1] > size:
        cuts.append(_snap(text, cuts[-1] + size, cuts[-1] + 1))
    cuts.append(n)
    out = []
    for own_start, own_end in zip(cuts, cuts[1:]):
        start = _snap(text, own_start - margin, 0) if own_start else 0
        end = min(n, own_end + margin)
        out.append(Window(start, end, own_start, own_end))
    return out


def longest_window(size: int = SIZE, margin: int = MARGIN) -> int:
    """The most characters :func:`windows` hands an engine at once."""
    return size + 2 * margin + SNAP


def find_windowed(finder: Callable[[str], list[Found]], text: str, size: int = SIZE,
                  margin: int = MARGIN) -> list[Found]:
    """What ``finder`` finds in each window of ``text``, with offsets into ``text``: each find
    kept from the window that owns its start (so never twice), sorted by position. ``finder``
    may return overlapping spans; they are returned as found."""
    found: list[Found] = []
    for w in windows(text, size, margin):
        part = text[w.start:w.end]
        for s in finder(part):
            start, end = w.start + s.start, w.start + s.end
            if w.own_start <= start < w.own_end:
                found.append(s if w.start == 0 else
                             replace(cast(Any, s), start=start, end=end, text=text[start:end]))
    return sorted(found, key=lambda s: (s.start, s.end))
