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
import unicodedata
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ctxleak.methods.rag.documents import RetrievedDocument

#: Two passages overlap when their normalised words share a run of this many consecutive words
#: (about one clause: enough that a shared sentence counts, not a shared stock phrase).
OVERLAP_WORDS = 8
#: A decoy is drawn among the eligible documents nearest in length to its target (characters).
NEAREST = 3
_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """``text`` as compared for overlap: NFC, case folded, its runs of letters and digits."""
    return tuple(_WORD.findall(unicodedata.normalize("NFC", text).casefold()))


@dataclass(frozen=True)
class Footprint:
    """What a context is made of, for :func:`shares_document`: its documents' ids, the
    :data:`OVERLAP_WORDS`-word runs of its passages, its passages shorter than that, and every
    passage's words (space-joined, space-padded) for the short ones' containment."""

    ids: frozenset[str]
    grams: frozenset[tuple[str, ...]]
    short: tuple[str, ...]
    joined: tuple[str, ...]


def footprint(texts: Iterable[str], ids: Iterable[str | None] = ()) -> Footprint:
    """The footprint of a context made of the passages ``texts`` with the document ``ids``
    (None for a document without one)."""
    grams: set[tuple[str, ...]] = set()
    short, joined = [], []
    for text in texts:
        w = words(text)
        if not w:
            continue
        joined.append(f" {' '.join(w)} ")
        if len(w) < OVERLAP_WORDS:
            short.append(joined[-1])
        grams.update(w[i:i + OVERLAP_WORDS] for i in range(len(w) - OVERLAP_WORDS + 1))
    return Footprint(frozenset(i for i in ids if i is not None), frozenset(grams),
                     tuple(short), tuple(joined))


def shares_document(a: Footprint, b: Footprint) -> bool:
    """Whether two contexts share a document: an id in common, a common run of
    :data:`OVERLAP_WORDS` words, or a short passage of one inside a passage of the other."""
    if a.ids & b.ids or not a.grams.isdisjoint(b.grams):
        return True
    return any(s in j for s in a.short for j in b.joined) or \
        any(s in j for s in b.short for j in a.joined)


@dataclass(frozen=True)
class Corpus:
    """The distinct documents seen in a run's rows (by id, else by normalised text), in the
    order first seen, each with its footprint."""

    documents: tuple[RetrievedDocument, ...]
    footprints: tuple[Footprint, ...]

    @classmethod
    def of(cls, contexts: Iterable[Sequence[RetrievedDocument] | None]) -> Corpus:
        seen: dict[object, RetrievedDocument] = {}
        for docs in contexts:
            for doc in docs or ():
                seen.setdefault(doc.id if doc.id is not None else words(doc.text), doc)
        docs_ = tuple(seen.values())
        return cls(docs_, tuple(footprint([d.text], [d.id]) for d in docs_))

    def eligible(self, own: Footprint) -> list[int]:
        """The documents (indices) that share nothing with the context ``own``."""
        return [i for i, f in enumerate(self.footprints) if not shares_document(own, f)]


def decoy_rng(seed: int, example_id: str | int, *stream: int) -> np.random.Generator:
    """The generator of one example's decoys: seeded by the run seed, the example's id (its
    CRC-32) and ``stream`` (the passage, or the control's number), never by its position."""
    key = zlib.crc32(str(example_id).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, key,
                                                         *stream]))


def pick_near(corpus: Corpus, candidates: Sequence[int], target: int,
              rng: np.random.Generator) -> int | None:
    """One of the :data:`NEAREST` ``candidates`` closest to ``target`` characters, drawn by
    ``rng`` (ties in length broken by id, then text: not by the order the rows came in);
    None without candidates."""
    if not candidates:
        return None
    docs = corpus.documents
    ranked = sorted(candidates, key=lambda i: (abs(len(docs[i].text) - target),
                                               docs[i].id or "", docs[i].text))
    near = ranked[:NEAREST]
    return near[int(rng.integers(len(near)))]


def decoy_set(corpus: Corpus, own: Footprint, target: int, rng: np.random.Generator,
              most: int) -> list[RetrievedDocument]:
    """Decoys for a whole context of ``target`` characters: documents sharing nothing with
    ``own`` (and not overlapping each other), each drawn near the characters still missing,
    until at least three quarters of the target is covered or ``most`` are drawn."""
    chosen: list[int] = []
    left = corpus.eligible(own)
    missing = target
    while left and len(chosen) < most and missing > target // 4:
        pick = pick_near(corpus, left, missing, rng)
        assert pick is not None
        chosen.append(pick)
        missing -= len(corpus.documents[pick].text)
        left = [i for i in left if i != pick
                and not shares_document(corpus.footprints[i], corpus.footprints[pick])]
    return [corpus.documents[i] for i in chosen]


__all__ = ["NEAREST", "OVERLAP_WORDS", "Corpus", "Footprint", "decoy_rng", "decoy_set",
           "footprint", "pick_near", "shares_document", "words"]
