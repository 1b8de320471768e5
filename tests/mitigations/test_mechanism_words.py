"""The Mechanism protocol's words with a default (ctxleak.mitigations.mechanisms): which documents
an answer needs, the streams it keeps in flight and a mechanism's own loss of a document, as each
of ctxleak's mechanisms answers them, and the defaults a subclass inherits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.toy_mechanism import FirstDocuments

from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.datastore import SIMILARITY_RANGE, Datastore
from ctxleak.mitigations.document_loss import document_loss, own_document_losses
from ctxleak.mitigations.dp_answer_vote import DPAnswerVote
from ctxleak.mitigations.dp_ksa import DPKSA
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_retrieval import threshold_grid, threshold_logprobs
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding, Mechanism
from ctxleak.mitigations.scrubbing import Scrubbing


def test_a_subclass_inherits_the_defaults():
    toy = FirstDocuments()
    assert Mechanism in type(toy).__mro__
    assert toy.documents_needed() == toy.min_documents == 2  # its min_documents
    assert toy.streams(5, False) == toy.streams(5, True) == 6  # one per document, the prior
    assert Scrubbing().documents_needed() == 1 and Scrubbing().streams(3, False) == 4


def test_each_mechanism_answers_the_documents_it_needs_and_its_streams():
    for vote in (DPVote(eps=2, shards=5), DPSparseVote(eps=2, shards=5)):
        assert vote.documents_needed() == 5  # one per shard, above min_documents (3)
        assert vote.streams(2, False) == vote.streams(40, True) == 6  # voters, no-retrieval
    # the answer vote: its voters and the question alone; DP-KSA: its voters only (the final
    # answer is decoded after them); all three need a document per shard, 3 shards at least
    answers, ksa = DPAnswerVote(eps=2, shards=4), DPKSA(eps=2, shards=4)
    assert answers.streams(9, False) == 5 and ksa.streams(9, True) == 4
    assert answers.documents_needed() == ksa.documents_needed() == 4
    assert DPAnswerVote.min_documents == DPKSA.min_documents == DPVote.min_documents == 3
    # without a datastore nothing is charged per document (the claim covers the dealt shards)
    request = AnswerRequest(documents=("a", "b", "c", "d"), prompt=lambda texts: [1])
    assert answers.document_charges(request, Decoding()) is None
    assert ksa.document_charges(request, Decoding()) is None
    rag = DPRAG(eps=5, top_k=8)
    assert rag.documents_needed() == 1
    assert rag.streams(3, over_datastore=False) == 4  # every document of the request, prior
    assert rag.streams(3, over_datastore=True) == 9  # about top_k of the datastore, prior
    assert CID(0.5).documents_needed() == 0
    assert CID(0.5).streams(7, False) == CID(1.0, 2.0).streams(7, True) == 2  # with and without


# -- a mechanism's own loss of a document ---------------------------------------------------------

STORE = Datastore(tuple((f"file-{i}", f"{('Customer file Account number', 'Billing record')[i % 2]} "
                                      f"{i % 10} {i % 10} {(i * 7) % 10}") for i in range(8)))
QUERY = "What is the account number ?"


@pytest.fixture(scope="module")
def copier():
    from helpers.digit_copier import digit_copier

    return digit_copier()


def _request(lm, seed):
    def prompt(texts):
        return lm.encode(f"Document : {' '.join(texts)} . {QUERY} Answer with digits only")

    return AnswerRequest(documents=(), prompt=prompt, seed=seed, query=QUERY, datastore=STORE)


def test_dp_rags_loss_of_a_document_it_left_out_is_the_thresholds_odds_by_hand(copier):
    """DP-RAG answers its own loss (what document_loss's isinstance ladder dispatched to): a
    document the private retrieval left out pays the threshold's odds alone, log P(τ | D) −
    log P(τ | D ∖ d) by hand from the exponential mechanism over the public grid."""
    mech, dec = DPRAG(eps=5, top_k=2), Decoding(max_new_tokens=3, min_new_tokens=3)
    request, answer = next((r, a) for r in (_request(copier, s) for s in range(10))
                           for a in mech.answer(copier, [r], dec) if a.datastore_used)
    left_out = [d for d, _ in STORE.documents if d not in answer.datastore_used]
    losses = mech.document_losses(copier, request, answer, left_out, dec)
    grid = threshold_grid(*SIMILARITY_RANGE, mech.grid)
    j = int(torch.argmin((grid - answer.steps[0]["threshold"]).abs()))
    for doc, loss in zip(left_out, losses):
        rest = Datastore.of([p for p in STORE.documents if p[0] != doc])
        by_hand = float(threshold_logprobs(STORE.similarities(QUERY), grid, 2, mech.eps / 10)[j]
                        - threshold_logprobs(rest.similarities(QUERY), grid, 2, mech.eps / 10)[j])
        assert loss.document == doc and loss.steps == (0.0,) * len(answer.steps)
        assert loss.total == pytest.approx(by_hand, abs=1e-12)
        assert loss == document_loss(mech, copier, request, answer, doc, dec)  # the one road


@pytest.mark.parametrize("mech", [DPVote(eps=60, shards=4, eps_token=20),
                                  DPSparseVote(eps=60, shards=4, eps_token=10, eps_svt=2)],
                         ids=["vote", "sparse"])
def test_a_votes_loss_of_each_document_is_the_public_functions(copier, mech):
    """The votes answer their own loss, document by document, in order; a document whose
    removal leaves its voter's reading as it was costs exactly nothing (by hand)."""
    dec = Decoding(max_new_tokens=3, min_new_tokens=3)
    request = _request(copier, 1)
    answer = mech.answer(copier, [request], dec)[0]
    docs = [d for d, _ in STORE.documents]
    losses = mech.document_losses(copier, request, answer, docs, dec)
    assert [loss.document for loss in losses] == docs
    assert losses == [document_loss(mech, copier, request, answer, d, dec) for d in docs]
    for doc, loss in zip(docs, losses):
        shard = STORE.shard_of(doc, 4)
        rest = Datastore.of([p for p in STORE.documents if p[0] != doc])
        if STORE.shard_search(QUERY, 4, 1)[shard] == rest.shard_search(QUERY, 4, 1)[shard]:
            assert loss.total == 0 and loss.changed.startswith("nothing")


def test_a_mechanism_without_a_loss_of_its_own_answers_none(copier):
    """The default (scrubbing, a toy) and CID: no loss of their own; the run then records none,
    and the public function refuses, naming the mechanism."""
    dec = Decoding(max_new_tokens=2, min_new_tokens=2)
    request = _request(copier, 0)
    for mech in (Scrubbing(detect=lambda text: []), FirstDocuments(), CID(0.5)):
        answer = CID(1.0).answer(copier, [request], dec)[0]
        assert mech.document_losses(copier, request, answer, ["file-0"], dec) is None
        assert own_document_losses(mech, copier, replace(request, ids=("file-0",)), answer,
                                   dec) is None
        with pytest.raises(ConfigError, match="mechanism"):
            document_loss(mech, copier, request, answer, "file-0", dec)
