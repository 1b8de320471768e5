"""What the mechanisms whose voters each read one shard share: the DP votes
(:mod:`~ctxleak.mitigations.dp_vote`, "Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy", Koga, Wu and Chaudhuri), the answer vote
(:mod:`~ctxleak.mitigations.dp_answer_vote`) and DP-KSA (:mod:`~ctxleak.mitigations.dp_ksa`,
"Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and Annavaram).

Where the request gives the datastore (:class:`~ctxleak.mitigations.datastore.Datastore`), as
the papers do, the datastore is partitioned into ``shards`` disjoint shards by a hash of each
document's id, and each voter retrieves its ``per_voter`` best documents for the question from
its own shard (BM25 over that shard alone): adding or removing one document of the datastore
changes one voter's prompt, and the claim (relation "document") is over the datastore. Where
the request gives only its retrieved list, that list is dealt into ``shards`` shards (document
i in shard ``i mod shards``, by retrieval position) and the claim (relation "shard") covers
changing one shard of that dealt list only: adding or removing one document shifts every later
document's shard, so no document-level ε follows, and which documents were retrieved is
outside it (:meth:`ShardedVoters.voter_documents`). Each mechanism keeps its own claim, answer
and document losses; the documents an answer needs, the streams it keeps in flight and each
document's charge are the voters' and are written once here.
"""

from __future__ import annotations

from typing import ClassVar

from ctxleak.errors import ConfigError
from ctxleak.mitigations.losses import Loss
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding, Mechanism


class ShardedVoters(Mechanism):
    """A mechanism of ``shards`` voters, each reading its own shard (module docstring);
    ``extra_streams``: the streams beyond the voters' one each (a vote's no-retrieval stream;
    none for DP-KSA, whose final answer is decoded after them)."""

    min_documents: ClassVar[int] = 3
    extra_streams: ClassVar[int] = 1
    shards: int
    per_voter: int

    def voter_documents(self, request: AnswerRequest) -> tuple[list[list[str]], tuple[str, ...]]:
        """Each voter's document texts and the datastore ids read: retrieved from the voter's
        shard of the request's datastore, else dealt from its retrieved list (document i in
        shard ``i mod shards``)."""
        store, docs = request.datastore, request.documents
        if store is None:
            if len(docs) < 2:
                raise ConfigError(f"documents: {self.name} needs several documents (one shard "
                                  f"per voter), got {len(docs)}", param="documents")
            if self.shards > len(docs):
                raise ConfigError(f"shards: {self.shards} shards need at least {self.shards} "
                                  f"documents, the request has {len(docs)}", param="shards")
            return [[d for i, d in enumerate(docs) if i % self.shards == s]
                    for s in range(self.shards)], ()
        if not request.query.strip():
            raise ConfigError(f"query: {self.name} retrieves from the datastore for the "
                              "question, and the request has none", param="query")
        if self.shards > len(store):
            raise ConfigError(f"shards: {self.shards} shards of {store.describe()} leave some "
                              f"empty: at most {len(store)}", param="shards")
        hits = store.shard_search(request.query, self.shards, self.per_voter)
        return [[h.text for h in shard] for shard in hits], tuple(h.id for s in hits for h in s)

    def document_charges(self, request: AnswerRequest, decoding: Decoding
                         ) -> dict[str, Loss] | None:
        """Over a datastore, the claim's ε for each document a voter reads (its shard's best
        ``per_voter`` for the question, ranked by a score of the question and that document
        alone), 0 for every other: removing a document no voter reads leaves every voter's
        prompt, and so the answer's distribution, unchanged; adding it back the same. The
        voters' steps are (ε, δ): no Rényi curve."""
        if request.datastore is None:
            return None
        _, read = self.voter_documents(request)
        return dict.fromkeys(read, Loss(float(self.claim(decoding).eps or 0.0)))

    def documents_needed(self) -> int:
        """One document per shard."""
        return self.shards

    def streams(self, documents: int, over_datastore: bool) -> int:
        """The voters, one per shard, and :attr:`extra_streams` more."""
        return self.shards + self.extra_streams


__all__ = ["ShardedVoters"]
