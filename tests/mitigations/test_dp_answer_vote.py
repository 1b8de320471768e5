"""The answer vote (ctxleak.mitigations.dp_answer_vote) on the digit copier, a tiny Llama that
repeats the digits of its prompt: the claim recomputed from the recorded step, the release when
the voters agree and ⊥ when they disagree, each document's own loss within the claim, the canary
audit catching a no-noise variant (issue 82), and one-line errors on bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers.broken_dp import NoNoiseAnswerVote

from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import limited_domain_gap
from ctxleak.methods.attacks.canary import (
    CANARY_QUERY,
    attack_score,
    plant_canaries,
    summarize_trials,
)
from ctxleak.methods.attacks.lower_bound import HOLDS, VIOLATED
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.document_loss import document_loss, own_document_losses
from ctxleak.mitigations.dp_answer_vote import (
    DPAnswerVote,
    answer_counts,
    candidates_of,
    normalise_answer,
    outcome_logprob,
    short_answer,
)
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.named import parse_mechanism
from ctxleak.mitigations.prompts import template_prompt

QUERY = "What is the account number ?"
#: every file on account 7 7 3: each voter that reads one answers "7 7 7 7"
AGREE = Datastore(tuple((f"file-{i}", "Customer file Account number 7 7 3") for i in range(12)))
#: each file on its own digit: the voters answer differently
DISAGREE = Datastore(tuple((f"file-{i}", f"Customer file Account number {i % 10} {i % 10} "
                            f"{(i * 3) % 10}") for i in range(12)))
DEC = Decoding(max_new_tokens=8, min_new_tokens=1)


@pytest.fixture(scope="module")
def copier():
    from helpers.digit_copier import digit_copier

    return digit_copier()


def _request(lm, store, seed=0):
    def prompt(texts):
        return lm.encode(f"Document : {' '.join(texts)} . {QUERY} Answer with digits only")

    return AnswerRequest(documents=(), prompt=prompt, seed=seed, query=QUERY, datastore=store)


def test_normalisation_by_hand():
    assert normalise_answer("The  Harwich ferry-port!") == "harwich ferryport"
    assert normalise_answer("An answer, a thing.") == "answer thing"
    assert normalise_answer("...") == ""
    assert short_answer("  Harwich.\nQuestion: more") == "Harwich."
    cands = candidates_of(["b", "a", "", "b"])
    assert cands == ["", "a", "b"]
    assert answer_counts(["b", "a", "", "b"], cands).tolist() == [1.0, 1.0, 2.0]


def test_claim_and_noise_by_hand():
    mech = DPAnswerVote(eps=10, shards=6)
    claim = mech.claim(DEC)
    assert (claim.eps, claim.delta, claim.relation) == (10.0, 1e-4, "shard")
    scale, gap = mech.noise()
    # 2/b + ln(1 + δ) = ε, gap = 2 + b·ln(1/δ)
    assert scale == pytest.approx(2 / (10 - math.log1p(1e-4)))
    assert gap == pytest.approx(2 + scale * math.log(1e4))
    assert mech.key() == "dp-answer-vote(eps=10,shards=6,delta=0.0001)"
    assert parse_mechanism(mech.key()) == mech
    assert parse_mechanism("dp-answer-vote:eps=10,shards=6,answer_tokens=4") == \
        DPAnswerVote(eps=10, shards=6, answer_tokens=4)


def test_claim_equals_a_recomputation_from_the_recorded_step(copier):
    mech = DPAnswerVote(eps=10, shards=6, answer_tokens=4)
    for answer in mech.answer(copier, [_request(copier, AGREE, s) for s in range(4)], DEC):
        (step,) = answer.steps
        eps = 2 / step["scale"] + math.log1p(step["delta_step"])
        assert eps == pytest.approx(answer.claim.eps, rel=1e-12)
        assert step["gap"] == pytest.approx(limited_domain_gap(step["scale"],
                                                                step["delta_step"], 1))
        assert answer.eps_used == answer.claim.eps == 10.0 and answer.tokens_paid == 1
        assert answer.claim.relation == "document" and answer.claim.delta == step["delta_step"]
        assert len(step["answers"]) == 6


def test_agreeing_voters_release_their_answer(copier):
    mech = DPAnswerVote(eps=10, shards=6, answer_tokens=4)
    answers = mech.answer(copier, [_request(copier, AGREE, s) for s in range(8)], DEC)
    released = [a for a in answers if a.steps[0]["source"] == "vote"]
    # five voters read a file (one shard retrieves none): 5 against 1 for the empty answer,
    # a lead of 4 over the gap of 3.84 votes; the noise (scale 0.2) decides some
    assert len(released) >= 4
    for a in released:
        assert copier.decode(list(a.response_ids)) == "7 7 7 7" == a.steps[0]["released"]
    # each voter's charge is the claim, a document no voter reads is not charged
    charges = mech.document_charges(_request(copier, AGREE), DEC)
    assert set(charges) == set(answers[0].datastore_used) and len(charges) == 5
    assert {c.eps for c in charges.values()} == {10.0}


def test_disagreeing_voters_abstain(copier):
    mech = DPAnswerVote(eps=10, shards=6, answer_tokens=4)
    answers = mech.answer(copier, [_request(copier, DISAGREE, s) for s in range(8)], DEC)
    for a in answers:
        step = a.steps[0]
        assert len(set(step["answers"])) == 6  # one vote each: no lead of 3.84 votes
        assert step["source"] == "abstained"
        assert step["released"] == step["no_retrieval_answer"]
        # the question-alone answer (its own tokens where its text is empty: never empty)
        assert copier.decode(list(a.response_ids)) == step["no_retrieval_answer"]
        assert a.response_ids and a.released >= a.tokens_paid == 1


def test_the_noise_is_seeded_per_request(copier):
    mech = DPAnswerVote(eps=10, shards=6, answer_tokens=4)
    one = mech.answer(copier, [_request(copier, AGREE, s) for s in range(6)], DEC)
    alone = [mech.answer(copier, [_request(copier, AGREE, s)], DEC)[0] for s in (0, 5)]
    assert [a.steps for a in alone] == [one[0].steps, one[5].steps]


def test_own_loss_by_hand_and_within_the_claim(copier):
    mech = DPAnswerVote(eps=10, shards=6, answer_tokens=4)
    request = _request(copier, DISAGREE)
    answer = mech.answer(copier, [request], DEC)[0]
    step = answer.steps[0]
    moved = 0
    for doc in answer.datastore_used:
        loss = document_loss(mech, copier, request, answer, doc, DEC)
        assert loss.check == 0 and loss.retrieval == 0 and len(loss.steps) == 1
        assert loss.within and abs(loss.total) <= answer.claim.eps
        moved += loss.total != 0
    assert moved
    # by hand: voter 0's answer moved to another answer, the outcome ⊥
    shard = Datastore.shard_of(answer.datastore_used[0], 6)
    other = step["answers"][:shard] + ["9 9 9 9"] + step["answers"][shard + 1:]
    cands = candidates_of(step["answers"], other)
    p = outcome_logprob(step["answers"], cands, None, step["scale"], step["gap"])
    q = outcome_logprob(other, cands, None, step["scale"], step["gap"])
    assert p == pytest.approx(q)  # one vote each either way: ⊥ as likely
    own = own_document_losses(mech, copier, replace(request, ids=answer.datastore_used),
                              answer, DEC)
    assert set(own) == set(answer.datastore_used)
    # a document no voter reads costs nothing
    quiet = next(d for d, _ in DISAGREE.documents if d not in answer.datastore_used)
    loss = document_loss(mech, copier, request, answer, quiet, DEC)
    assert loss.total == 0 and loss.changed.startswith("nothing")


def test_a_release_costs_at_most_eps(copier):
    """The step's loss of moving one vote, released answer or ⊥, by the limited-domain
    bound: |L| ≤ 2/b + ln(1 + δ) = ε, and the released answer's odds move by e^{±2/b}."""
    mech = DPAnswerVote(eps=2, shards=6)
    scale, gap = mech.noise()
    base = ["a"] * 5 + ["b"]
    for moved in (["a"] * 4 + ["b", "b"], ["a"] * 6, ["a"] * 5 + ["c"], ["a"] * 5 + [""]):
        cands = candidates_of(base, moved)
        for released in ("a", None):
            loss = outcome_logprob(base, cands, released, scale, gap) - \
                outcome_logprob(moved, cands, released, scale, gap)
            assert abs(loss) <= 2.0 + 1e-12


def _canary_audit(lm, mech, trials, copies, tokens, group_eps, group_delta):
    def prompt_for(_):
        return template_prompt(lm, CANARY_QUERY, reserve=tokens)

    requests = [AnswerRequest(documents=(t.context,) * copies, prompt=prompt_for(t),
                              seed=t.trial) for t in trials]
    dec = Decoding(max_new_tokens=tokens, min_new_tokens=1)
    answers = mech.answer(lm, requests, dec)
    records = [{"score": attack_score(lm.decode(list(a.response_ids)), t.canary),
                "included": t.included, "composed_eps": group_eps}
               for t, a in zip(trials, answers)]
    return summarize_trials(records, threshold=2, delta=group_delta)


def test_the_canary_audit_catches_a_no_noise_answer_vote(copier):
    """Each trial's 3 voters read the canary's document (a dealt list, relation "shard"), so
    the two neighbours differ in 3 shards: group privacy, 3ε and δ·(1 + e^ε + e^{2ε}). The
    broken vote releases the voters' answer, which repeats the planted canary's digits; the
    honest one (ε = 0.05) abstains and answers from the question alone."""
    eps, copies, tokens = 0.05, 3, 4
    docs = [{"id": "d0", "context": "Customer file."}, {"id": "d1", "context": "Billing record."}]
    trials = plant_canaries(load_examples(docs, task="summarization"), 24, 0, 3)
    honest, broken = DPAnswerVote(eps=eps, shards=copies), NoNoiseAnswerVote(eps=eps,
                                                                              shards=copies)
    claim = honest.claim(Decoding(max_new_tokens=tokens))
    group_eps = copies * claim.eps
    group_delta = claim.delta * sum(math.exp(i * claim.eps) for i in range(copies))
    out = {kind: _canary_audit(copier, m, trials, copies, tokens, group_eps, group_delta)
           for kind, m in (("honest", honest), ("broken", broken))}
    assert out["broken"]["law"] == VIOLATED and out["broken"]["eps_lower"] > group_eps
    assert out["honest"]["law"] == HOLDS and out["honest"]["eps_lower"] <= group_eps


@pytest.mark.parametrize("kwargs, param", [
    ({"eps": 0, "shards": 4}, "eps"), ({"eps": 1, "shards": 2}, "shards"),
    ({"eps": 1, "shards": 4, "delta": 1.5}, "delta"), ({"eps": 1, "shards": 4, "per_voter": 0},
                                                       "per_voter"),
    ({"eps": 1, "shards": 4, "answer_tokens": 0}, "answer_tokens"),
    ({"eps": 1e-6, "shards": 4, "delta": 0.5}, "eps")])
def test_bad_parameters_name_the_parameter(kwargs, param):
    with pytest.raises(ConfigError) as info:
        DPAnswerVote(**kwargs)
    assert info.value.param == param and "\n" not in str(info.value)


def test_greedy_and_too_few_documents_are_refused(copier):
    mech = DPAnswerVote(eps=1, shards=4)
    with pytest.raises(ConfigError, match="greedy"):
        mech.answer(copier, [_request(copier, AGREE)], Decoding(greedy=True))
    few = AnswerRequest(documents=("a", "b"), prompt=lambda t: copier.encode("Document :"))
    with pytest.raises(ConfigError, match="shards"):
        mech.answer(copier, [few], DEC)
