"""Public documents under every mechanism of the privacy proxy: part of the prompt, not of the
documents a mechanism protects.

A document of class ``public`` (the operator's, :meth:`~ctxleak.proxy.budgets.Budgets.public`)
is no secret of anyone's, so no mechanism has to bound its influence: the prompt every
mechanism reads renders the public texts first, then the texts the mechanism passes
(:func:`with_public`). ``prompt([])``, CID's "without the documents" side (Def. 3.1 of
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models"), the DP
votes' no-retrieval stream ("Privacy-Preserving Retrieval-Augmented Generation with Differential
Privacy", Koga, Wu and Chaudhuri) and DP-RAG's prior ("RAG with Differential Privacy",
Grislain), still holds them: they are read at full strength. Over a datastore the public
documents are retrieved without noise by BM25 over the public documents alone
(:func:`public_hits`), which reads no private document, so the mechanism's claim over the
datastore's private documents is untouched by it.
"""

from __future__ import annotations

from functools import lru_cache

from ctxleak.mitigations.bm25 import BM25
from ctxleak.mitigations.datastore import Datastore
from ctxleak.run.classes import with_public


@lru_cache(maxsize=4)
def store_of(pairs: tuple[tuple[str, str], ...]) -> Datastore | None:
    """The datastore of ``pairs`` (None: none), kept so that its shards and word counts are
    built once for the same documents, not once per request (the last few sets only: the set
    changes each time a document's budget runs out)."""
    return Datastore(pairs) if pairs else None


def public_hits(pairs: tuple[tuple[str, str], ...], query: str, k: int) -> tuple[str, ...]:
    """The texts of the ``k`` best public documents ``pairs`` for ``query``, best first: BM25
    indexed on the public documents alone (its inverse document frequencies read no private
    document)."""
    if not pairs or k < 1 or not query.strip():
        return ()
    index = _index(pairs)
    return tuple(index.documents[i][1] for i, _ in index.search(query, k))


@lru_cache(maxsize=4)
def _index(pairs: tuple[tuple[str, str], ...]) -> BM25:
    """BM25 over ``pairs`` (the public documents), built once per set."""
    return BM25(pairs)


__all__ = ["public_hits", "store_of", "with_public"]
