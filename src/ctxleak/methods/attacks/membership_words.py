"""What the membership attacks that hide words share (:mod:`.membership`, :mod:`.calibrated`):
one query as a :class:`MembershipQuestion`, the words of a document that may be hidden or asked
for (:func:`candidates`: once in it, rarest in the corpus first), and the masked text
(:func:`mask_words`, :func:`masked_text`).

A candidate is letters (4 or more) or a number of 2 digits or more (:data:`CANDIDATE`), once in
its document; its rarity is how many documents of the corpus given hold it
(:func:`document_frequency`, words as :func:`ctxleak.methods.text_match.words` counts them:
case folded, punctuation aside).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.text_match import words

#: A word that can be masked or asked for: letters (4 or more) or a number of 2 digits or more.
CANDIDATE = re.compile(r"[^\W\d_]\w{3,}(?:['’\-]\w+)*|\d+(?:[.,:]\d+)*\d")


@dataclass(frozen=True)
class MembershipQuestion:
    """One query of one attack about one document: ``expected`` holds the words a right answer
    gives (mask, interrogation, calibrated; empty for direct); ``part`` numbers the document's
    queries (calibrated: 0 is the original query, 1 … the perturbed ones)."""

    attack: str
    document_id: str
    member: bool
    part: int
    question: str
    expected: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.attack}:{self.document_id}:{self.part}"


def document_frequency(documents: Sequence[AttackDocument]) -> Counter[str]:
    """How many documents hold each word."""
    return Counter(w for d in documents for w in set(words(d.text)))


def candidates(text: str, df: Mapping[str, int]) -> list[tuple[int, int, str, int]]:
    """(corpus frequency, -length, word, start) of each word that may be masked or asked
    for: a candidate word once in the text, rarest first."""
    found = [(m.group(0), m.start()) for m in CANDIDATE.finditer(text)]
    counts = Counter(words(text))
    out = []
    for word, start in found:
        key = words(word)
        if len(key) == 1 and counts[key[0]] == 1:
            out.append((df.get(key[0], 0), -len(word), word, start))
    return sorted(out, key=lambda c: (c[0], c[1], c[3]))


def _adjacent(text: str, a: int, b: int, wa: str, wb: str) -> bool:
    """Whether two words of ``text`` (at ``a`` and ``b``) have only spaces or punctuation
    between them."""
    (s, ws), (e, _) = sorted([(a, wa), (b, wb)])
    return not words(text[s + len(ws):e])


def mask_words(text: str, df: Mapping[str, int], masks: int) -> list[tuple[int, str]]:
    """(start, word) of the ``masks`` rarest candidate words, no two adjacent, in text order
    (MBA's choice, by rarity: :mod:`.membership`)."""
    chosen: list[tuple[int, str]] = []
    for _, _, word, start in candidates(text, df):
        if len(chosen) == masks:
            break
        if all(not _adjacent(text, start, s, word, w) for s, w in chosen):
            chosen.append((start, word))
    return sorted(chosen)


def masked_text(text: str, chosen: Sequence[tuple[int, str]],
                swaps: Sequence[tuple[int, int, str]] = ()) -> str:
    """``text`` with each chosen word (start, word; in text order) as ``[MASK_i]``, and each of
    ``swaps`` (start, end, the text put there; none overlapping another) in its place."""
    edits = sorted([(start, start + len(word), f"[MASK_{i + 1}]")
                    for i, (start, word) in enumerate(chosen)] + list(swaps))
    masked, end = [], 0
    for start, stop, put in edits:
        masked.append(text[end:start] + put)
        end = stop
    return "".join(masked) + text[end:]


__all__ = ["CANDIDATE", "MembershipQuestion", "candidates", "document_frequency",
           "mask_words", "masked_text"]
