"""Passages as the unit of context influence ("Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", Def. 3.1 with the subset S = one passage).

A retriever hands a model a list of passages; ContextCite attributes to sentences or any
partition of the context. Here the context is the concatenation of its passages, each tokenised
on its own (the separator goes to the front of the passage it precedes, so a word keeps its
leading-space token), which makes every passage an exact ``[start, end)`` span of the context's
token ids. The influence of passage j on a response y is Def. 3.2 with D_{i,n} = passage j:
``Σ_t |log p̄_λ(y_t | D) − log p̄_λ(y_t | D∖passage_j)|`` (nats), scored by the n-gram engine
(:func:`~ctxleak.methods.influence.ngrams.window_influence_many`, prefix reuse), so a passage
costs what one n-gram window costs: one ablated forward pass of the prompt and response.

What stays equal: an example without passages is tokenised exactly as before (the whole context
string at once).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import accumulate

# The separator between passages given as a list (it starts every passage but the first) and
# the pieces of a list: defined with the prompts every defence answers from.
from ctxleak.mitigations.prompts import LIST_SEPARATOR, list_pieces

#: How one context string may be split into passages.
SPLITS = ("sentence", "paragraph")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_PARAGRAPH_END = re.compile(r"\n[ \t]*\n\s*(?=\S)")


#: Words that end in a period without ending the sentence (titles, "e.g.", "St.", "vs.").
ABBREVIATIONS = frozenset({
    "dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr", "mt", "vs", "cf", "fig", "gen", "col",
    "lt", "sgt", "capt", "rev", "hon", "e.g", "i.e", "approx", "dept", "univ"})
_LAST_WORD = re.compile(r"([^\s(\[\"']+)\.$")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # U.S, e.g, i.e, U.K


def _ends_sentence(text: str, end: int) -> bool:
    """Whether the ``.``, ``!`` or ``?`` just before ``end`` ends a sentence: not after an
    abbreviation (:data:`ABBREVIATIONS`), an initial (``J.``), dotted letters (``U.S.``),
    nor ``No.`` before a number (a lower-case text's sentences still end at each period)."""
    if text[end - 1] != ".":
        return True
    after = text[end:].lstrip()
    last = _LAST_WORD.search(text, 0, end)
    if last is None:
        return True
    word = last.group(1)
    if word.lower() in ABBREVIATIONS or _DOTTED.fullmatch(word):
        return False
    if len(word) == 1 and word.isupper():
        return False  # an initial: J. R. R. Tolkien
    return not (word == "No" and after[:1].isdigit())


def split_context(text: str, mode: str) -> list[str]:
    """``text`` cut into pieces whose concatenation is ``text`` exactly: after each sentence end
    (``.``, ``!``, ``?`` then whitespace; not the period of an abbreviation, an initial or
    ``U.S.``, :func:`_ends_sentence`) for ``sentence``, at blank lines for ``paragraph``. The
    whitespace between two pieces starts the second one."""
    if mode not in SPLITS:
        raise ValueError(f"unknown passage split '{mode}': use {' or '.join(SPLITS)}")
    pattern = _SENTENCE_END if mode == "sentence" else _PARAGRAPH_END
    cuts = [m.start() for m in pattern.finditer(text)
            if mode == "paragraph" or _ends_sentence(text, m.start())]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if text[a:b]]


def piece_spans(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` token spans of consecutive pieces of ``lengths`` tokens."""
    return [(end - n, end) for n, end in zip(lengths, accumulate(lengths))]


def clip_spans(spans: Sequence[tuple[int, int]], length: int) -> list[tuple[int, int] | None]:
    """Each span cut to the first ``length`` context tokens (a context cut to fit the window or
    to a context size); None for a passage cut out entirely."""
    out: list[tuple[int, int] | None] = []
    for a, b in spans:
        a, b = min(a, length), min(b, length)
        out.append((a, b) if b > a else None)
    return out


__all__ = ["ABBREVIATIONS", "LIST_SEPARATOR", "SPLITS", "clip_spans", "list_pieces", "piece_spans",
           "split_context"]
