"""Where a targeted anchor may be cut from its document: never across a value the ledger looks
for (a secret, a piece of personal data: :func:`ctxleak.sensitive.find_sensitive`, as
:func:`ctxleak.sensitive.carried_values` counts them), so that an answer repeating that value
carried it out of the document rather than echoing the question ("The Good and The Bad:
Exploring Privacy Issues in Retrieval-Augmented Generation (RAG)", §3: the targeted
information part steers the retriever; it need not hold what is extracted).

:func:`anchor_windows` gives the words of a document and the start of every window of
``size`` words that holds no such value; where none does, the starts of the longest runs of
clean words (a shorter anchor); where every word is a value, every window (the document has
nothing else to anchor on).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ctxleak.sensitive import find_sensitive

_WORD = re.compile(r"\S+")


@lru_cache(maxsize=4096)
def value_words(text: str) -> tuple[bool, ...]:
    """For each whitespace-parted word of ``text``: whether it overlaps a secret or a piece of
    personal data (places named alone aside, values under three characters aside, as
    :func:`ctxleak.sensitive.carried_values`)."""
    spans = [(s.start, s.end) for s in find_sensitive(text)
             if s.type != "location" and len(" ".join(s.text.split())) >= 3]
    return tuple(any(a < m.end() and m.start() < b for a, b in spans)
                 for m in _WORD.finditer(text))


def anchor_windows(text: str, size: int) -> tuple[list[str], list[int], int]:
    """``(words, starts, length)``: the document's words, the starts of the anchors that may be
    cut from it and their length in words (``size``, or less where only shorter clean runs
    exist; module docstring)."""
    words = text.split()
    if not words:
        return words, [0], size
    bad = value_words(text)
    size = min(size, len(words))
    clean = [i for i in range(len(words) - size + 1) if not any(bad[i:i + size])]
    if clean or not any(bad):
        return words, clean or [0], size
    runs: list[tuple[int, int]] = []  # (start, length) of the runs of clean words
    i = 0
    while i < len(words):
        if bad[i]:
            i += 1
            continue
        j = i
        while j < len(words) and not bad[j]:
            j += 1
        runs.append((i, j - i))
        i = j
    if not runs:
        return words, list(range(len(words) - size + 1)), size
    longest = max(n for _, n in runs)
    return words, [s for s, n in runs if n == longest], longest


__all__ = ["anchor_windows", "value_words"]
