"""A DP mechanism's own ex-post loss of one datastore document (ctxleak.mitigations.document_loss):
the sparse-vector round's probability by hand and against sampling, each step's loss within the
bound its mechanism's proof gives, the recomputation agreeing with what decoding recorded on a
tiny model, a broken mechanism caught, and one-line errors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import ABSTAIN, limited_domain_gap, vote_scale
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.document_loss import (
    document_loss,
    svt_round_loss,
    svt_round_probability,
    vote_step_loss,
)
from ctxleak.mitigations.dp_rag import DPRAG, dp_rag_logprobs
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding

CITIES = ("paris", "rome", "berlin", "madrid", "lisbon", "vienna", "athens", "dublin", "oslo",
          "prague", "warsaw", "sofia")
STORE = Datastore(tuple((f"doc-{i}", f"{city} is a capital city number {i}")
                        for i, city in enumerate(CITIES)))
QUERY = "is paris or rome a capital city ?"
#: For the digit copier (each voter votes the digit its document holds most): 12 customer
#: files, two in three of them on account 7 7, one in three on 3 3.
DIGIT_STORE = Datastore(tuple(
    (f"file-{i}", f"Customer file Account number {3 if i % 3 == 2 else 7} "
                  f"{3 if i % 3 == 2 else 7} {i % 10}") for i in range(12)))
DIGIT_QUERY = "What is the account number ?"
#: For DP-RAG's private retrieval: files whose word similarity to the question varies.
HEADS = ("Customer file Account number", "Billing record", "Customer file", "Account number")
RAG_STORE = Datastore(tuple((f"file-{i}", f"{HEADS[i % 4]} {i % 10} {i % 10} {(i * 7) % 10}")
                            for i in range(12)))


def _request(lm, seed=0, store=STORE, query=QUERY):
    def prompt(texts):
        if store is not STORE:
            return lm.encode(f"Document : {' '.join(texts)} . {query} Answer with digits only")
        return lm.encode(f"{' '.join(texts)} question : {query} answer :".strip())

    return AnswerRequest(documents=(), prompt=prompt, seed=seed, query=query, datastore=store)


@pytest.fixture(scope="module")
def copier():
    from helpers.digit_copier import digit_copier

    return digit_copier()


# -- the sparse-vector round ----------------------------------------------------------------------


def test_a_round_at_the_threshold_is_a_coin_by_hand():
    # a + ν < T + ρ with a = T: P(ν − ρ < 0) = 1/2 (both noises symmetric), paid or free
    assert svt_round_probability([5.0], 5.0, 1.0, paid=True) == pytest.approx(0.5, abs=1e-10)
    assert svt_round_probability([5.0], 5.0, 1.0, paid=False) == pytest.approx(0.5, abs=1e-10)
    # far below the threshold it pays almost surely; far above it never does
    assert svt_round_probability([-200.0], 5.0, 1.0, paid=True) > 1 - 1e-12
    assert svt_round_probability([205.0], 5.0, 1.0, paid=True) < 1e-12


def test_a_round_of_tiny_probability_keeps_its_loss():
    """At a large ε counts far from the threshold make a round's probability underflow a
    float64; its log and the loss stay finite and within ε_svt."""
    agree = [(0.0, 1.0)] * 3 + [(40.0, 39.0)]
    loss = svt_round_loss(agree, 32.0, 60.0, paid=True)
    assert svt_round_probability([a for a, _ in agree], 32.0, 60.0, True) == 0.0
    assert math.isfinite(loss) and 0 < abs(loss) <= 60.0


def test_a_round_against_sampling():
    """Two free steps then a paid one, and an unfinished round, against 400,000 sampled rounds
    (numpy's Laplace noise, the mechanism's scales), within 4 standard errors."""
    rng, n, eps, threshold = np.random.default_rng(7), 400_000, 1.5, 16.0
    for agree, paid in (([20.0, 17.0, 14.0], True), ([18.0, 15.0], False)):
        rho = rng.laplace(0.0, 2.0 / eps, n)
        ok = np.ones(n, dtype=bool)
        for i, a in enumerate(agree):
            pays = a + rng.laplace(0.0, 4.0 / eps, n) < threshold + rho
            ok &= pays if (paid and i == len(agree) - 1) else ~pays
        p = svt_round_probability(agree, threshold, eps, paid)
        assert abs(ok.mean() - p) < 4 * math.sqrt(p * (1 - p) / n), (agree, p, ok.mean())


def test_a_round_loss_is_within_its_epsilon():
    """Sparse vector (Lyu, Su and Li, Alg. 1, one positive) is ε-DP for queries of sensitivity
    1: any round's loss is at most ε_svt, whichever way each step's count moved."""
    rnd = random.Random(3)
    worst = 0.0
    for _ in range(60):
        n = rnd.randint(1, 6)
        with_d = [float(rnd.randint(0, 32)) for _ in range(n)]
        without = [a + rnd.choice((-1.0, 0.0, 1.0)) for a in with_d]
        loss = svt_round_loss(list(zip(with_d, without)), 16.0, 0.8, paid=rnd.random() < 0.7)
        assert abs(loss) <= 0.8 + 1e-9
        worst = max(worst, abs(loss))
    assert worst > 0.1  # the bound is exercised, not met by zeros


# -- the limited-domain vote -----------------------------------------------------------------------


def test_a_vote_step_by_hand():
    scale, gap = 0.5, 3.0
    with_d = torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64)
    without = torch.tensor([2.0, 2.0, 0.0], dtype=torch.float64)  # one voter moved 0 -> 1
    # with: token 0 against the threshold 1 + gap; without: token 0 (a tie goes to the lower
    # id) against 2 + gap
    p = math.exp(3 / scale) / (math.exp(3 / scale) + math.exp((1 + gap) / scale))
    q = math.exp(2 / scale) / (math.exp(2 / scale) + math.exp((2 + gap) / scale))
    assert vote_step_loss(with_d, without, 0, scale, gap, 1) == pytest.approx(
        math.log(p / q), abs=1e-12)
    assert vote_step_loss(with_d, without, ABSTAIN, scale, gap, 1) == pytest.approx(
        math.log((1 - p) / (1 - q)), abs=1e-12)
    # the domain's one token changes: token 1, possible with the document only, is the step's
    # δ (an infinite loss); the other way round it is never released
    lead, trail = (torch.tensor(c, dtype=torch.float64) for c in ([1.0, 2.0], [2.0, 1.0]))
    assert vote_step_loss(lead, trail, 1, scale, gap, 1) == math.inf
    assert vote_step_loss(trail, lead, 1, scale, gap, 1) == -math.inf


def test_a_vote_step_loss_is_within_the_step_epsilon():
    """Outside its δ (an outcome impossible on one side) a limited-domain step's loss is at
    most 2/b + ln(1 + δ) when one voter moves its vote."""
    rnd, delta = random.Random(11), 1e-3
    scale = vote_scale(1.0, delta)
    for domain in (1, 2, 3):
        gap = limited_domain_gap(scale, delta, domain)
        for _ in range(40):
            votes = [rnd.randint(0, 5) for _ in range(12)]
            moved = list(votes)
            moved[rnd.randrange(12)] = rnd.randint(0, 5)
            with_d, without = (torch.bincount(torch.tensor(v), minlength=8).double()
                               for v in (votes, moved))
            for outcome in (*range(8), ABSTAIN):
                loss = vote_step_loss(with_d, without, outcome, scale, gap, domain)
                if math.isfinite(loss):
                    assert abs(loss) <= 2 / scale + math.log1p(delta) + 1e-9


# -- on a tiny model -------------------------------------------------------------------------------


def _vote_answer(lm, mech, seed=0, tokens=6):
    dec = Decoding(max_new_tokens=tokens, min_new_tokens=tokens)
    request = _request(lm, seed, DIGIT_STORE, DIGIT_QUERY)
    return request, mech.answer(lm, [request], dec)[0], dec


@pytest.mark.parametrize("mech", [DPVote(eps=120, shards=6, eps_token=20),
                                  DPSparseVote(eps=60, shards=6, eps_token=10, eps_svt=2)],
                         ids=["vote", "sparse"])
def test_a_vote_answer_loss_per_document(copier, mech):
    """Each document a voter read: the recomputed votes of its voter match the record, the
    votes recorded are the histogram's, and each paid step stays within its step's ε; a
    document whose removal leaves its voter's reading unchanged costs exactly nothing."""
    request, answer, dec = _vote_answer(copier, mech)
    for step in answer.steps:
        counts = torch.bincount(torch.tensor(step["votes"]))
        assert len(step["votes"]) == 6 and int(counts.max()) == step["top_votes"]
        assert step["agree"] == step["votes"].count(step["no_retrieval_token"])
    budget = mech.budget(dec)
    per_step = budget.eps_token + math.log1p(budget.delta_step) + budget.eps_svt
    moved = 0
    for doc_id in answer.datastore_used:
        loss = document_loss(mech, copier, request, answer, doc_id, dec)
        assert loss.check == 0 and loss.retrieval == 0
        assert len(loss.steps) == len(answer.steps)
        assert all(abs(x) <= per_step + 1e-9 or x == math.inf for x in loss.steps)
        moved += any(x != 0 for x in loss.steps)
        assert loss.to_dict()["total"] == loss.total and "voter" in loss.changed
        assert loss.within
    assert moved  # some document moved its voter's votes
    def reads(store, doc):
        return [h.text for h in store.shard_search(DIGIT_QUERY, 6, 1)[store.shard_of(doc, 6)]]

    quiet = [doc for doc, _ in DIGIT_STORE.documents if reads(DIGIT_STORE, doc) == reads(
        Datastore.of([p for p in DIGIT_STORE.documents if p[0] != doc]), doc)]
    assert quiet
    loss = document_loss(mech, copier, request, answer, quiet[0], dec)
    assert loss.total == 0 and loss.within and loss.changed.startswith("nothing")


def _rag_answer(lm, mech, dec):
    """The first of seeds 0-9 whose private retrieval keeps some document."""
    for seed in range(10):
        request = _request(lm, seed, RAG_STORE, DIGIT_QUERY)
        answer = mech.answer(lm, [request], dec)[0]
        if answer.datastore_used:
            return request, answer
    raise AssertionError("no seed kept a document")


def test_a_dp_rag_answer_loss_per_document(copier):
    """A document in the prompts: its steps' losses within ε_t, the threshold's within
    eps_retrieval, the recomputed mechanism log-probs equal to the record; one left out pays
    the threshold's odds alone; the whole within the claim."""
    mech = DPRAG(eps=5, top_k=2)
    dec = Decoding(max_new_tokens=5, min_new_tokens=3)
    request, answer = _rag_answer(copier, mech, dec)
    eps_t = mech.token_eps(dec)
    used = document_loss(mech, copier, request, answer, answer.datastore_used[0], dec)
    assert used.check < 1e-6
    assert all(abs(x) <= eps_t + 1e-9 for x in used.steps) and any(x != 0 for x in used.steps)
    assert abs(used.retrieval) <= mech.retrieval_eps + 1e-9 and used.within
    left_out = next(d for d, _ in RAG_STORE.documents if d not in answer.datastore_used)
    other = document_loss(mech, copier, request, answer, left_out, dec)
    assert other.steps == (0.0,) * len(answer.steps) and other.total == other.retrieval
    assert "within its claim" in used.describe()


class _Loud(DPRAG):
    """DP-RAG whose exponential mechanism runs at 50 times its ε_t: its claim is broken."""

    def step_logprobs(self, doc_logits, empty_logits, eps_token, temperature, excluded):
        return dp_rag_logprobs(doc_logits, empty_logits, 50 * eps_token, self.clip, temperature,
                               excluded)


def test_a_broken_mechanism_spends_beyond_its_step_epsilon(copier):
    mech = _Loud(eps=5, top_k=2)
    dec = Decoding(max_new_tokens=6, min_new_tokens=6)
    request, answer = _rag_answer(copier, mech, dec)
    losses = [document_loss(mech, copier, request, answer, d, dec)
              for d in answer.datastore_used]
    assert max(abs(x) for loss in losses for x in loss.steps) > mech.token_eps(dec)


def test_bad_input_names_the_field(copier):
    tiny_lm = copier
    mech = DPVote(eps=6, shards=4, eps_token=1)
    request, answer, dec = _vote_answer(copier, mech, tokens=2)
    # another decoding than the answer's: its claim differs, refused rather than misread
    with pytest.raises(ConfigError, match="decoding: dp-vote.* claims ε = 6"):
        document_loss(mech, tiny_lm, request, answer, answer.datastore_used[0],
                      Decoding(max_new_tokens=12, min_new_tokens=12))
    with pytest.raises(ConfigError, match="document: 'nope'"):
        document_loss(mech, tiny_lm, request, answer, "nope", dec)
    listed = AnswerRequest(documents=("a b", "c d", "e f"), prompt=request.prompt)
    with pytest.raises(ConfigError, match="datastore"):
        document_loss(mech, tiny_lm, listed, answer, "file-0", dec)
    with pytest.raises(ConfigError, match="mechanism"):
        document_loss(CID(0.5), tiny_lm, request, answer, "file-0", dec)  # type: ignore[arg-type]
    old = type(answer)(answer.response_ids, answer.stopped_on_eos, answer.claim,
                       answer.tokens_paid, tuple({k: v for k, v in s.items() if k != "votes"}
                                                 for s in answer.steps))
    with pytest.raises(ConfigError, match="no voters' votes"):
        document_loss(mech, tiny_lm, request, old, answer.datastore_used[0], dec)


def test_a_one_document_datastore(copier):
    """Without its only document the datastore is empty: DP-RAG's threshold then counts
    nothing, and the loss is still computed."""
    one = Datastore((("only", "Customer file Account number 4 4 2"),))
    dec = Decoding(max_new_tokens=3, min_new_tokens=3)
    request = _request(copier, 0, one, DIGIT_QUERY)
    mech = DPRAG(eps=5, top_k=1)
    answer = mech.answer(copier, [request], dec)[0]
    loss = document_loss(mech, copier, request, answer, "only", dec)
    assert math.isfinite(loss.total) and loss.within and loss.retrieval != 0
