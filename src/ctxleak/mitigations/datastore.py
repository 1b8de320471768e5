"""The datastore a RAG system retrieves from, as the DP mechanisms' input: its documents, the
disjoint shards the DP votes partition it into, and the retrieval each reader runs.

"Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy" (Koga, Wu and
Chaudhuri) partitions the datastore into disjoint parts, one per voter, and each voter retrieves
from its own part: adding or removing one document changes one part, so one voter, and a vote
that is DP with respect to one voter's change is DP with respect to one document of the
datastore. ctxleak assigns a document to a shard by a hash of its id alone
(:meth:`Datastore.shard_of`), a split that looks at no text and at no other document, so adding
a document moves no other; each voter ranks its own shard by :func:`relevance`, a score of the
question and one document alone, so a document outside its voter's best few can change no
voter's prompt (what the per-document accounting of the votes needs).

"RAG with Differential Privacy" (Grislain) thresholds every document's similarity to the query;
the threshold's exponential mechanism has sensitivity 1 only where a document's similarity
depends on that document and the query alone. BM25's inverse document frequency reads the other
documents, so the private retrieval thresholds :func:`word_similarity` (the cosine of word
counts) instead.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ctxleak.bundled import with_datastore
from ctxleak.errors import ConfigError

_WORD = re.compile(r"[^\W_]+")

#: The public range of :func:`word_similarity` a private retrieval's thresholds span over a
#: datastore. A question of q distinct words found once each in a document of d words has a
#: cosine near sqrt(q / d): 0.4 for 8 words in 50. Thresholds above 0.6 would keep no
#: document for any question, and an exponential mechanism over a grid mostly made of them
#: mostly keeps nothing.
SIMILARITY_RANGE = (0.0, 0.6)


def word_similarity(query: str, text: str) -> float:
    """The cosine similarity of the word counts of ``query`` and ``text`` (lower-cased words
    of letters and digits), in [0, 1]; 0 where either has no word. It reads only the two texts,
    so one document's similarity never moves another's."""
    a, b = Counter(_WORD.findall(query.lower())), Counter(_WORD.findall(text.lower()))
    dot = sum(a[w] * b[w] for w in a)
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


#: Function words left out of :func:`relevance`: a question's "what is the" says nothing of
#: which document answers it.
STOP_WORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how i in is it its "
    "me my of on or our s she that the their them they this to was we were what when where "
    "which who whom whose why will with you your".split())


def content_words(text: str) -> Counter[str]:
    """The lower-cased words of ``text`` that are not :data:`STOP_WORDS`, counted."""
    return Counter(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS)


def relevance(query: str, text: str) -> float:
    """:func:`word_similarity` over the words that are not :data:`STOP_WORDS`: the cosine of
    the content-word counts of ``query`` and ``text``, in [0, 1]. It reads only the two texts,
    so adding or removing one document never moves another's score."""
    return _cosine(content_words(query), content_words(text))


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(a[w] * b[w] for w in a)
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


@dataclass(frozen=True)
class Retrieved:
    """One retrieved document: its id, its text and the retriever's score."""

    id: str
    text: str
    score: float


#: The bundled sets that come with a datastore of their own (a JSONL of {id, text}, under the
#: package's data/demo folder), from :data:`ctxleak.bundled.BUNDLED_SETS`.
BUNDLED_DATASTORES = with_datastore()


#: How many queries' similarities a :class:`Datastore` keeps.
KEPT_QUERIES = 8


@dataclass(frozen=True)
class Datastore:
    """The documents a RAG system retrieves from, as ``(id, text)`` pairs with unique ids."""

    documents: tuple[tuple[str, str], ...]
    _parts: dict[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict, init=False,
                                                           repr=False, compare=False)
    _words: dict[str, tuple[Counter[str], ...]] = field(default_factory=dict, init=False,
                                                       repr=False, compare=False)
    #: the last few queries' similarities (a mechanism's charges and its answer read the same)
    _similar: dict[str, tuple[float, ...]] = field(default_factory=dict, init=False,
                                                   repr=False, compare=False)

    def __post_init__(self) -> None:
        docs = tuple((str(i), str(t)) for i, t in self.documents)
        if not docs:
            raise ConfigError("datastore: no documents", param="datastore")
        seen: set[str] = set()
        for doc_id, _ in docs:
            if doc_id in seen:
                raise ConfigError(f"datastore: document id '{doc_id}' appears twice",
                                  param="datastore")
            seen.add(doc_id)
        object.__setattr__(self, "documents", docs)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Datastore:
        """A datastore of ``(id, text)`` pairs; a pair seen twice (same id, same text) counts
        once, an id with two texts is refused."""
        texts: dict[str, str] = {}
        for doc_id, text in pairs:
            if texts.setdefault(str(doc_id), str(text)) != str(text):
                raise ConfigError(f"datastore: document id '{doc_id}' has two different texts",
                                  param="datastore")
        return cls(tuple(texts.items()))

    def __len__(self) -> int:
        return len(self.documents)

    @staticmethod
    def shard_of(doc_id: str, shards: int) -> int:
        """The shard of the document ``doc_id`` among ``shards``: a hash of the id alone."""
        digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % shards

    def shards(self, shards: int) -> tuple[tuple[tuple[str, str], ...], ...]:
        """The documents of each of ``shards`` disjoint shards (:meth:`shard_of`), each in the
        datastore's order; a shard may be empty."""
        parts: list[list[tuple[str, str]]] = [[] for _ in range(shards)]
        for doc in self.documents:
            parts[self.shard_of(doc[0], shards)].append(doc)
        return tuple(tuple(p) for p in parts)

    def shard_search(self, query: str, shards: int, k: int) -> list[list[Retrieved]]:
        """Each shard's ``k`` best documents for ``query`` by :func:`relevance` (a score of the
        question and the document alone), ties in the datastore's order; a document that shares
        no content word with the question (relevance 0) is never read, so a shard may give
        fewer than ``k``, or none (its voter then votes on the prompt without documents). A
        score that read the shard's other documents (BM25's inverse document frequency) would
        let a document no voter reads still change which documents its voter
        reads; with this one, removing a document outside its shard's best ``k`` leaves every
        voter's prompt as it was, what the per-document accounting of the votes needs."""
        parts = self._parts.get(shards)
        if parts is None:
            rows: list[list[int]] = [[] for _ in range(shards)]
            for n, (doc_id, _) in enumerate(self.documents):
                rows[self.shard_of(doc_id, shards)].append(n)
            parts = self._parts.setdefault(shards, tuple(tuple(r) for r in rows))
        words = self._words.get("all") or self._words.setdefault(
            "all", tuple(content_words(text) for _, text in self.documents))
        asked = content_words(query)
        out = []
        for part in parts:
            scored = sorted((-score, n) for n in part if (score := _cosine(asked, words[n])))
            out.append([Retrieved(*self.documents[n], -neg) for neg, n in scored[:k]])
        return out

    def similarities(self, query: str) -> list[float]:
        """Every document's :func:`word_similarity` to ``query``, in order, computed once for
        the last :data:`KEPT_QUERIES` queries (an answer over the datastore reads them twice:
        what each document is charged before it, and the answer's own retrieval)."""
        kept = self._similar.get(query)
        if kept is None:
            kept = tuple(word_similarity(query, text) for _, text in self.documents)
            while len(self._similar) >= KEPT_QUERIES:
                try:  # the oldest query out (another thread may have taken it already)
                    self._similar.pop(next(iter(self._similar)), None)
                except (StopIteration, RuntimeError):
                    break
            self._similar[query] = kept
        return list(kept)

    def describe(self) -> str:
        return f"a datastore of {len(self)} documents"


__all__ = ["SIMILARITY_RANGE", "Datastore", "Retrieved", "word_similarity"]
