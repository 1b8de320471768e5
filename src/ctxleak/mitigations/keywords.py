"""The keyword space of DP-KSA ("Differentially Private Retrieval-Augmented Generation", Tang,
Flemings, Wang and Annavaram): the keywords of one voter's response, the histogram of the
voters' keyword sets, and the propose-test-release step that releases its top keywords.

Keywords (:func:`response_keywords`), chosen for a small model whose voters agree on the answer
but not on the sentence around it: the response's maximal runs of words that carry a name or a
number (a word holding a digit, or capitalised where it does not open a sentence), each run one
keyword as written ("19 May", "0131 496 0245", "Harwich"), the question's own words and function
words left out of the runs; a response with no such run gives its content words (lower-case,
the same words left out) instead. Each voter contributes a *set*, so changing one voter's
response moves every keyword's count by at most 1 (L∞ sensitivity 1).

Propose-test-release ("Differential Privacy and Robust Statistics", Dwork and Lei; the
stability argument of "Differentially Private Feature Selection via Stability Arguments",
Thakurta and Smith): the proposed output is the set of the ``k`` most frequent keywords. With
the counts sorted, ``g = c_(k) − c_(k+1)`` (a missing count is 0); every sorted count moves by at
most 1 when one voter changes, so ``g`` moves by at most 2, and
``dist = max(0, ⌈g/2⌉ − 1)`` moves by at most 1. Where ``dist ≥ 1`` (``g ≥ 3``) every neighbour
keeps the same top-k set (its k-th count still exceeds its (k+1)-th). The test releases the set
when ``dist + Lap(1/ε) > ln(1/(2δ))/ε`` and abstains otherwise: an unstable histogram
(``dist = 0``) passes with probability ``½·e^{−ε·threshold} = δ``, so the release is
(ε, δ)-DP for one voter's change. The set is released in alphabetical order, a function of the
set alone: the order of the counts within it is not covered by the test.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from ctxleak.mitigations.datastore import STOP_WORDS

#: Words a short answer says around its keyword: left out like the function words.
FILLER_WORDS = frozenset("answer answers also based can could document following given "
                         "here just keyword keywords mentioned not according question "
                         "response so text there yes no".split())

_WORD = re.compile(r"[^\W_]+(?:['’.\-][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?:;\n]\s*$")


def _plain(word: str) -> str:
    """A word as it is compared with the question's and the function words: lower-case, a
    possessive ``'s`` dropped."""
    low = word.lower()
    return re.sub(r"['’]s$", "", low)


def question_words(question: str) -> frozenset[str]:
    """The question's own words (:func:`_plain`), which a response repeats without answering."""
    return frozenset(_plain(w) for w in _WORD.findall(question))


def response_keywords(response: str, question: str, content_words: bool = True
                      ) -> frozenset[str]:
    """One voter's keyword set (module docstring): runs of name or number words, else (where
    ``content_words``) its content words, the question's words and function words left out."""
    asked = question_words(question)
    runs: list[str] = []
    current: list[str] = []
    words: list[str] = []
    for match in _WORD.finditer(response):
        word = match.group(0)
        word = re.sub(r"['’]s$", "", word)
        plain = _plain(word)
        opens = not response[:match.start()].strip() or \
            bool(_SENTENCE_END.search(response[:match.start()]))
        dropped = plain in asked or plain in STOP_WORDS or plain in FILLER_WORDS
        if not dropped:
            words.append(plain)
        named = any(c.isdigit() for c in word) or (word[:1].isupper() and not opens)
        if named and not dropped:
            current.append(word)
        elif current:
            runs.append(" ".join(current))
            current = []
    if current:
        runs.append(" ".join(current))
    if runs or not content_words:
        return frozenset(runs)
    return frozenset(w for w in words if len(w) > 1)


def keyword_counts(sets: Iterable[Iterable[str]]) -> Counter[str]:
    """How many voters' sets hold each keyword."""
    counts: Counter[str] = Counter()
    for keywords in sets:
        counts.update(set(keywords))
    return counts


def top_keywords(counts: Counter[str], k: int) -> tuple[tuple[str, ...], int]:
    """The proposed output and its gap: the ``k`` most frequent keywords (ties: alphabetical),
    the ones with a count of at least 1, and ``g = c_(k) − c_(k+1)`` (missing counts 0)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    values = [c for _, c in ranked] + [0] * (k + 1)
    top = tuple(w for w, c in ranked[:k] if c > 0)
    return top, int(values[k - 1] - values[k])


def stability_distance(gap: int) -> int:
    """``max(0, ⌈g/2⌉ − 1)`` (module docstring): a lower bound on how many voters must change
    before the top-k set can, with sensitivity 1."""
    return max(0, math.ceil(gap / 2) - 1)


def ptr_threshold(eps: float, delta: float) -> float:
    """The test's threshold ``ln(1/(2δ))/ε``: an unstable histogram passes with probability δ."""
    return math.log(1.0 / (2.0 * delta)) / eps


def pass_logprob(distance: float, eps: float, delta: float) -> float:
    """``log P(distance + Lap(1/ε) > threshold)``, exactly (the Laplace tail)."""
    x = (ptr_threshold(eps, delta) - distance) * eps  # the threshold in noise units
    return math.log(0.5) - x if x >= 0 else math.log1p(-0.5 * math.exp(x))


def abstain_logprob(distance: float, eps: float, delta: float) -> float:
    """``log P(distance + Lap(1/ε) ≤ threshold)``."""
    x = (ptr_threshold(eps, delta) - distance) * eps
    return math.log1p(-0.5 * math.exp(-x)) if x >= 0 else math.log(0.5) + x


def outcome_logprob(sets: Sequence[Iterable[str]], released: Sequence[str] | None, k: int,
                    eps: float, delta: float) -> float:
    """``log P(outcome | voters' sets)`` of the test's outcome: ``released`` (sorted) or None
    for nothing released (an abstention, or no keyword at all: certain then); −inf where the
    set released is not the sets' top-k set."""
    top, gap = top_keywords(keyword_counts(sets), k)
    distance = stability_distance(gap)
    if released is None:
        return 0.0 if not top else abstain_logprob(distance, eps, delta)
    if tuple(sorted(top)) != tuple(released):
        return -math.inf
    return pass_logprob(distance, eps, delta)


def keywords_context(released: Sequence[str]) -> str:
    """The text the final prompt holds in place of documents: the released keywords."""
    return "Keywords: " + ", ".join(released) + "."


__all__ = ["FILLER_WORDS", "abstain_logprob", "keyword_counts", "keywords_context",
           "outcome_logprob", "pass_logprob", "ptr_threshold", "question_words",
           "response_keywords", "stability_distance", "top_keywords"]
