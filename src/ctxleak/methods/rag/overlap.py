"""When two retrieved contexts share a document, and decoy documents that share none
("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2:
a control context must not hold the example's own private facts).

Two contexts share a document when a document id is in both, or when a passage of one overlaps
a passage of the other: their normalised texts (Unicode NFC, case folded, words of letters and
digits only, so whitespace and punctuation are ignored) share a run of :data:`OVERLAP_WORDS`
consecutive words, or a passage shorter than that lies whole inside the other's words. A RAG log
in which one record is retrieved for most questions then gives no example a control that holds
that record, and a chunk re-cut with a new id but the same sentences is still the same document.

Decoys: documents of the run's corpus (every distinct document seen in the run's rows, in the
order first seen) that share nothing with an example, drawn near a target length in characters
by a generator seeded from the run's seed and the example's id (so a draw does not depend on the
batch size or on which examples are processed together).
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Sequence

import numpy as np

from ctxleak.methods.rag.documents import RetrievedDocument
from ctxleak.normal_text import normal_text

#: Two passages overlap when their normalised words share a run of this many consecutive words
#: (about one clause: enough that a shared sentence counts, not a shared stock phrase).
OVERLAP_WORDS = 8
#: A decoy is drawn among the eligible documents nearest in length to its target (characters).
NEAREST = 3
_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """``text`` as compared for overlap: :func:`ctxleak.normal_text.normal_text` (NFKC,
    invisible characters removed), case folded, its runs of letters and digits."""
    return tuple(_WORD.findall(normal_text(text).casefold()))


class Corpus:
    """The distinct documents seen in a run's rows (by id, else by normalised text), in the
    order first seen, and which of them overlap (an id in common, a common run of
    :data:`OVERLAP_WORDS` words, or a document shorter than that inside another), worked out
    once per document, not per turn: a context's documents are indices
    here (:meth:`add`), and two contexts share a document when one's documents overlap any of
    the other's (:meth:`forbidden`). Passages that are not retrieved documents (plain strings)
    take part in the overlap but are never drawn as decoys."""

    def __init__(self) -> None:
        self.documents: list[RetrievedDocument] = []
        self.decoyable: list[bool] = []
        self._keys: dict[object, int] = {}
        self._conflicts: list[frozenset[int]] | None = None
        self._by_length: tuple[list[int], list[int]] | None = None

    def add(self, texts: Sequence[str], docs: Sequence[RetrievedDocument] | None
            ) -> frozenset[int]:
        """Register one context's passages (``docs``: its retrieved documents, one per
        passage, or None) and return their indices."""
        self._conflicts = None
        out = []
        for j, text in enumerate(texts):
            doc = docs[j] if docs is not None and j < len(docs) else None
            key: object = doc.id if doc is not None and doc.id is not None else words(text)
            at = self._keys.get(key)
            if at is None:
                at = self._keys[key] = len(self.documents)
                self.documents.append(doc if doc is not None
                                      else RetrievedDocument(text=text, rank=j + 1))
                self.decoyable.append(doc is not None)
            out.append(at)
        return frozenset(out)

    def _overlaps(self) -> list[frozenset[int]]:
        """Each document's overlapping documents (itself included)."""
        if self._conflicts is not None:
            return self._conflicts
        found: list[set[int]] = [{i} for i in range(len(self.documents))]
        by_gram: dict[tuple[str, ...], list[int]] = {}
        joined, short = [], []
        for i, doc in enumerate(self.documents):
            w = words(doc.text)
            joined.append(f" {' '.join(w)} ")
            if len(w) < OVERLAP_WORDS:
                short.append(i)
            for g in {w[k:k + OVERLAP_WORDS] for k in range(len(w) - OVERLAP_WORDS + 1)}:
                by_gram.setdefault(g, []).append(i)
        for group in by_gram.values():  # the documents holding one run overlap
            if len(group) > 1:
                for i in group:
                    found[i].update(group)
        for i in short:
            for k, text in enumerate(joined):
                if k != i and joined[i].strip() and joined[i] in text:
                    found[i].add(k)
                    found[k].add(i)
        self._conflicts = [frozenset(f) for f in found]
        return self._conflicts

    def by_length(self) -> tuple[list[int], list[int]]:
        """The documents (indices) by length in characters, then id, then text; their
        lengths."""
        if self._by_length is None or len(self._by_length[0]) != len(self.documents):
            order = sorted(range(len(self.documents)),
                           key=lambda i: (len(self.documents[i].text), *self.tiebreak(i)))
            self._by_length = (order, [len(self.documents[i].text) for i in order])
        return self._by_length

    def tiebreak(self, i: int) -> tuple[str, str]:
        doc = self.documents[i]
        return doc.id or "", doc.text

    def forbidden(self, own: Iterable[int]) -> frozenset[int]:
        """The documents a context made of ``own`` shares: those overlapping any of its own."""
        overlaps = self._overlaps()
        return frozenset().union(*(overlaps[i] for i in own))

    def eligible_set(self, own: Iterable[int]) -> set[int]:
        """The documents (indices) that share nothing with a context made of ``own`` and may
        be drawn as decoys, as a set (what :func:`pick_near` looks candidates up in)."""
        shut = self.forbidden(own)
        return {i for i, ok in enumerate(self.decoyable) if ok and i not in shut}


def decoy_rng(seed: int, example_id: str | int, *stream: int) -> np.random.Generator:
    """The generator of one example's decoys: seeded by the run seed, the example's id (its
    CRC-32) and ``stream`` (the passage, or the control's number), never by its position."""
    key = zlib.crc32(str(example_id).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, key,
                                                         *stream]))


def pick_near(corpus: Corpus, candidates: Iterable[int], target: int,
              rng: np.random.Generator) -> int | None:
    """One of the :data:`NEAREST` ``candidates`` closest to ``target`` characters, drawn by
    ``rng`` (ties in length broken by the documents' ids and texts, never by the order the
    rows came in); None without candidates. Walks out from ``target`` over the corpus sorted by
    length (:meth:`Corpus.by_length`), not over a sort of the candidates."""
    allowed = candidates if isinstance(candidates, (set, frozenset)) else set(candidates)
    if not allowed:
        return None
    order, lengths = corpus.by_length()
    right = bisect_left(lengths, target)
    left = right - 1
    near: list[int] = []
    while len(near) < NEAREST and (left >= 0 or right < len(order)):
        # the closer side next; at equal distance the one whose (id, text) sorts first
        take_left = right >= len(order) or (left >= 0 and (
            (target - lengths[left], *corpus.tiebreak(order[left]))
            <= (lengths[right] - target, *corpus.tiebreak(order[right]))))
        i = order[left] if take_left else order[right]
        if take_left:
            left -= 1
        else:
            right += 1
        if i in allowed:
            near.append(i)
    return near[int(rng.integers(len(near)))]


def decoy_set(corpus: Corpus, own: Iterable[int], target: int, rng: np.random.Generator,
              most: int) -> list[RetrievedDocument]:
    """Decoys for a whole context of ``target`` characters: documents sharing nothing with the
    context made of ``own`` (nor with each other), each drawn near the characters still
    missing, until at least three quarters of the target is covered or ``most`` are drawn."""
    chosen: list[int] = []
    left = corpus.eligible_set(own)
    missing = target
    while left and len(chosen) < most and missing > target // 4:
        pick = pick_near(corpus, left, missing, rng)
        assert pick is not None
        chosen.append(pick)
        missing -= len(corpus.documents[pick].text)
        left -= corpus.forbidden([pick])
    return [corpus.documents[i] for i in chosen]


__all__ = ["NEAREST", "OVERLAP_WORDS", "Corpus", "decoy_rng", "decoy_set", "pick_near",
           "words"]
