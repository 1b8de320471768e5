"""A lexical retriever over a list of documents: Okapi BM25 ("The Probabilistic Relevance
Framework: BM25 and Beyond", Robertson and Zaragoza), standard library only.

The score of document d for query q is

    Σ_{t ∈ q} idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl)),
    idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5)),

over lower-cased words with the bundled retriever's stop words left out (k1 = 1.2, b = 0.75,
the query's distinct words). Scores are rounded to 4 decimals and ties broken by document id,
as ``data/demo/rag_audit/retriever.py`` does, so that over the bundled Northwind corpus (each
document's text and source path indexed) the two return the same documents in the same order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxleak.errors import ConfigError

#: The bundled retriever's stop words.
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from have how i in is it my of on or our s the "
    "there this to was we what whats when where which who why will with you your".split())


def words(text: str) -> list[str]:
    """The lower-cased words (runs of ``[a-z0-9]``) of ``text`` without stop words."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


@dataclass(frozen=True)
class BM25:
    """A BM25 index over ``(id, text)`` pairs; ``search`` ranks them for a query."""

    documents: tuple[tuple[str, str], ...]
    k1: float = 1.2
    b: float = 0.75
    _bags: tuple[Counter[str], ...] = field(init=False, repr=False, compare=False)
    _lengths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.documents:
            raise ConfigError("BM25 needs at least one document to index", param="documents")
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ConfigError(f"BM25 needs k1 >= 0 and b in [0, 1], not k1={self.k1}, "
                              f"b={self.b}", param="k1")
        bags = [words(text) for _, text in self.documents]
        object.__setattr__(self, "_bags", tuple(Counter(bag) for bag in bags))
        object.__setattr__(self, "_lengths", tuple(len(bag) for bag in bags))

    def scores(self, query: str) -> list[float]:
        """The BM25 score of every document for ``query``, in index order (unrounded)."""
        n = len(self.documents)
        mean = sum(self._lengths) / n
        terms = sorted(set(words(query)))
        df = {t: sum(t in bag for bag in self._bags) for t in terms}
        out = []
        for bag, length in zip(self._bags, self._lengths):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / mean) if mean else self.k1
            for t in terms:
                tf = bag[t]
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    score += idf * tf * (self.k1 + 1) / (tf + norm)
            out.append(score)
        return out

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents for ``query``: (index in ``documents``, score rounded to 4
        decimals), best first, ties broken by document id. Documents that share no word with
        the query score 0 and still fill the ``k`` places, as the bundled retriever's do."""
        ranked = sorted(((-round(s, 4), self.documents[i][0], i)
                         for i, s in enumerate(self.scores(query))))
        return [(i, -neg) for neg, _, i in ranked[:k]]


def index(ids: Sequence[str], texts: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> BM25:
    """A :class:`BM25` index over ``texts`` named by ``ids``."""
    return BM25(tuple(zip(ids, texts)), k1=k1, b=b)


__all__ = ["BM25", "STOPWORDS", "index", "words"]
