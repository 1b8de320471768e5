"""DP-KSA ("Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and
Annavaram; ctxleak.mitigations.dp_ksa, keywords): keywords by hand, the propose-test-release
step's probabilities by hand and its (ε, δ) inequality over neighbouring voters, the claim
recomputed from the recorded steps, the final prompt holding no document, each document's own
loss within the claim (and a broken test's beyond), the charges, and one-line errors."""

from __future__ import annotations

import math
import random

import pytest
from helpers.broken_dp import NoNoiseKSA

from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.document_loss import document_loss
from ctxleak.mitigations.dp_ksa import DPKSA
from ctxleak.mitigations.keywords import (
    abstain_logprob,
    keyword_counts,
    keywords_context,
    outcome_logprob,
    pass_logprob,
    ptr_threshold,
    response_keywords,
    stability_distance,
    top_keywords,
)
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.named import parse_mechanism

#: For the digit copier (each voter answers the digits its document holds most): 12 customer
#: files, two in three of them on account 7 7, one in three on 3 3.
STORE = Datastore(tuple(
    (f"file-{i}", f"Customer file Account number {3 if i % 3 == 2 else 7} "
                  f"{3 if i % 3 == 2 else 7} {i % 10}") for i in range(12)))
QUERY = "What is the account number ?"
DEC = Decoding(temperature=0.8, max_new_tokens=4, min_new_tokens=4)


@pytest.fixture(scope="module")
def copier():
    from helpers.digit_copier import digit_copier

    return digit_copier()


def _request(lm, seed=0, seen=None):
    def prompt(texts):
        if seen is not None:
            seen.append(list(texts))
        return lm.encode(f"Document : {' '.join(texts)} . {QUERY} Answer with digits only")

    return AnswerRequest(documents=(), prompt=prompt, seed=seed, query=QUERY, datastore=STORE)


# -- keywords and the test, by hand ------------------------------------------------------------


def test_keywords_of_a_response_by_hand():
    q = "Where is Calloway Freight's headquarters?"
    assert response_keywords("Calloway Freight's headquarters is located in Harwich, alongside "
                             "the ferry port.", q) == {"Harwich"}
    assert response_keywords("The answer is: Calloway Freight's canteen.", q) == {"canteen"}
    # a run of number and name words is one keyword; a sentence's first word is not a name
    assert response_keywords("Safety week opens on 19 May. Staff attend.",
                             "What is the opening day of safety week?") == {"19 May"}
    assert response_keywords("Call 0131 496 0245 today", "What is the phone number?") \
        == {"0131 496 0245"}
    assert response_keywords("", q) == frozenset()


def test_top_keywords_gap_and_distance_by_hand():
    counts = keyword_counts([{"a", "b"}, {"a"}, {"a", "c"}, {"a"}, {"a", "b"}])
    assert counts == {"a": 5, "b": 2, "c": 1}
    assert top_keywords(counts, 1) == (("a",), 3)
    assert top_keywords(counts, 2) == (("a", "b"), 1)
    assert top_keywords(counts, 3) == (("a", "b", "c"), 1)  # the 4th count is 0
    assert top_keywords(keyword_counts([{"x"}, {"y"}]), 1) == (("x",), 0)  # tie: alphabetical
    assert [stability_distance(g) for g in range(7)] == [0, 0, 0, 1, 1, 2, 2]


def test_test_probabilities_by_hand():
    eps, delta = 2.0, 1e-3
    t = math.log(1 / (2 * delta)) / eps
    assert ptr_threshold(eps, delta) == pytest.approx(t)
    # an unstable histogram passes with probability δ exactly
    assert math.exp(pass_logprob(0, eps, delta)) == pytest.approx(delta)
    # the Laplace tail on either side of the threshold
    assert math.exp(pass_logprob(5, eps, delta)) == pytest.approx(1 - 0.5 * math.exp(-(5 - t) * 2))
    assert math.exp(pass_logprob(2, eps, delta)) == pytest.approx(0.5 * math.exp(-(t - 2) * 2))
    for d in (0, 1, 2, 5, 9):
        assert math.exp(pass_logprob(d, eps, delta)) + math.exp(abstain_logprob(d, eps, delta)) \
            == pytest.approx(1.0)


def test_the_test_is_eps_delta_dp_over_one_voters_change():
    """P(o | sets) ≤ e^ε·P(o | sets') + δ for every outcome o (each possible top-k set and the
    abstention) of random neighbouring voters' sets (one voter's set replaced)."""
    rng = random.Random(0)
    words = "abcd"
    eps, delta = 1.0, 1e-3
    for _ in range(1500):
        m, k = rng.randint(3, 9), rng.randint(1, 2)
        sets = [frozenset(w for w in words if rng.random() < 0.5) for _ in range(m)]
        other = list(sets)
        other[rng.randrange(m)] = frozenset(w for w in words if rng.random() < 0.5)
        outcomes = {None, tuple(sorted(top_keywords(keyword_counts(sets), k)[0])) or None,
                    tuple(sorted(top_keywords(keyword_counts(other), k)[0])) or None}
        for o in outcomes:
            for a, b in ((sets, other), (other, sets)):
                p = math.exp(outcome_logprob(a, o, k, eps, delta))
                q = math.exp(outcome_logprob(b, o, k, eps, delta))
                assert p <= math.exp(eps) * q + delta + 1e-12, (a, b, o, p, q)


# -- the mechanism on the digit copier ---------------------------------------------------------


def test_claim_equals_a_recomputation_from_the_recorded_steps(copier):
    mech = DPKSA(eps=10, shards=6, voter_tokens=4)
    answers = mech.answer(copier, [_request(copier, seed=s) for s in range(4)], DEC)
    for a in answers:
        rec, tokens = a.steps[0], a.steps[1:]
        # the claim: the one paid step's (ε, δ), nothing on the tokens
        assert (a.claim.eps, a.claim.delta, a.claim.relation) == (10.0, 1e-4, "document")
        assert a.eps_used == pytest.approx(a.claim.eps) and rec["delta_step"] == a.claim.delta
        assert a.tokens_paid == 0 and not any(s["paid"] for s in tokens)
        assert [s["token_id"] for s in tokens] == list(a.response_ids)
        # the histogram, its gap and distance and the threshold, recomputed independently
        counts: dict[str, int] = {}
        for voter in rec["voter_keywords"]:
            for w in set(voter):
                counts[w] = counts.get(w, 0) + 1
        ranked = sorted(counts.values(), reverse=True) + [0, 0]
        assert rec["top_counts"] == sorted(counts.values(), reverse=True)[:2]
        assert rec["gap"] == ranked[0] - ranked[1]
        assert rec["distance"] == max(0, math.ceil(rec["gap"] / 2) - 1)
        assert rec["threshold"] == pytest.approx(math.log(1 / (2 * 1e-4)) / 10)
        best = max(counts, key=lambda w: (counts[w], [-ord(c) for c in w]))
        assert rec["released"] == ([best] if rec["passed"] else None)
    # 4 of the 6 voters read a 7-file and answer 7s, 1 a 3-file: a gap of 3 at ε = 10 passes
    # with probability 1 − ½e^{−(1 − 0.85)·10} ≈ 0.89
    assert [len(r.steps[0]["voter_keywords"]) for r in answers] == [6] * 4
    assert any(a.steps[0]["released"] == ["7 7 7 7"] for a in answers)


def test_the_final_prompt_holds_the_keywords_and_no_document(copier):
    seen: list[list[str]] = []
    mech = DPKSA(eps=10, shards=6, voter_tokens=4)
    answer = mech.answer(copier, [_request(copier, seed=2, seen=seen)], DEC)[0]
    final = seen[-1]
    released = answer.steps[0]["released"]
    assert final == ([keywords_context(released)] if released else [])
    texts = dict(STORE.documents)
    assert not any(texts[d] in " ".join(final) for d in answer.datastore_used)
    # greedy decoding is honoured (the final answer post-processes the release)
    greedy = Decoding(max_new_tokens=4, min_new_tokens=4, greedy=True)
    again = mech.answer(copier, [_request(copier, seed=2)], greedy)[0]
    assert again.steps[0] == answer.steps[0]


def test_noise_is_seeded_per_request(copier):
    mech = DPKSA(eps=1.5, shards=6, voter_tokens=4)
    one = mech.answer(copier, [_request(copier, seed=s) for s in range(12)], DEC)
    two = mech.answer(copier, [_request(copier, seed=s) for s in (5, 3)], DEC)
    assert [a.steps for a in two] == [one[5].steps, one[3].steps]
    # gap 3 (distance 1) at ε = 1.5: passes with probability ½e^{−(5.68 − 1)·1.5} ≈ 0.0005
    assert all(a.steps[0]["released"] is None for a in one)


def test_each_documents_loss_is_within_the_claim_and_charged(copier):
    mech = DPKSA(eps=10, shards=6, voter_tokens=4)
    request = _request(copier, seed=0)
    answer = mech.answer(copier, [request], DEC)[0]
    charges = mech.document_charges(request, DEC)
    assert set(charges) == set(answer.datastore_used)
    assert {c.eps for c in charges.values()} == {10.0}
    losses = [document_loss(mech, copier, request, answer, d, DEC) for d, _ in STORE.documents]
    assert all(loss.within and loss.check == 0 for loss in losses)
    # a document no voter reads costs nothing; one whose voter's keywords move costs the ratio
    # of the test's outcome probabilities, exactly
    unread = [x for x in losses if x.document not in charges]
    assert unread and all(x.total == 0 for x in unread)
    rec = answer.steps[0]
    seven = next(x for x in losses if x.document in charges and
                 rec["voter_keywords"][Datastore.shard_of(x.document, 6)] == ["7 7 7 7"])
    if rec["released"] == ["7 7 7 7"]:  # gap 3 → 2 without it: distance 1 → 0
        assert seven.total == pytest.approx(pass_logprob(1, 10, 1e-4) - math.log(1e-4))


def test_a_broken_test_is_beyond_its_claim(copier):
    """With two voters on each of two accounts the top is a tie: the honest test passes with
    probability δ, the broken one always, and a document whose voter breaks the tie the other
    way has an infinite loss."""
    ids: list[str] = []
    for j in range(200):  # four ids in four different shards of 4
        if Datastore.shard_of(f"f{j}", 4) not in {Datastore.shard_of(i, 4) for i in ids}:
            ids.append(f"f{j}")
    store = Datastore(tuple((i, f"Customer file Account number {d} {d}")
                            for i, d in zip(ids, (7, 7, 3, 3))))
    shards = 4
    mech = NoNoiseKSA(eps=2, shards=shards, voter_tokens=4)

    def prompt(texts):
        return copier.encode(f"Document : {' '.join(texts)} . {QUERY} Answer with digits only")

    request = AnswerRequest(documents=(), prompt=prompt, seed=0, query=QUERY, datastore=store)
    answer = mech.answer(copier, [request], DEC)[0]
    assert answer.steps[0]["gap"] == 0 and answer.steps[0]["released"] is not None
    losses = [document_loss(mech, copier, request, answer, d, DEC) for d in ids]
    assert any(math.isinf(x.total) and not x.within for x in losses)


def test_bad_parameters_and_answers_name_the_field(copier):
    for kwargs, param in (({"eps": 0, "shards": 4}, "eps"), ({"eps": 1, "shards": 2}, "shards"),
                          ({"eps": 1, "shards": 4, "keywords": 0}, "keywords"),
                          ({"eps": 1, "shards": 4, "delta": 1.5}, "delta"),
                          ({"eps": 1, "shards": 4, "voter_tokens": True}, "voter_tokens")):
        with pytest.raises(ConfigError, match=f"^{param}:"):
            DPKSA(**kwargs)
    mech = DPKSA(eps=10, shards=6, voter_tokens=4)
    request = _request(copier)
    answer = mech.answer(copier, [request], DEC)[0]
    bare = type(answer)(answer.response_ids, answer.stopped_on_eos, answer.claim, 0,
                        answer.steps[1:])
    with pytest.raises(ConfigError, match="^answer: its first step records no voters"):
        document_loss(mech, copier, request, bare, "file-0", DEC)
    with pytest.raises(ConfigError, match="^shards: 13 shards"):
        DPKSA(eps=1, shards=13).answer(copier, [request], DEC)


def test_named_and_keyed():
    mech = parse_mechanism("dp-ksa:eps=2,shards=4,keywords=2")
    assert mech == DPKSA(eps=2, shards=4, keywords=2)
    assert mech.key() == "dp-ksa(eps=2,shards=4,delta=0.0001,keywords=2)"
    assert parse_mechanism(mech.key()) == mech
    assert mech.streams(10, over_datastore=True) == 4 and mech.documents_needed() == 4


def test_keyword_first_opens_the_answer_with_the_release_and_keeps_the_claim(copier):
    plain = DPKSA(eps=10, shards=6, voter_tokens=4, keyword_first=False)
    first = DPKSA(eps=10, shards=6, voter_tokens=4)  # the default
    assert first.keyword_first and not first.content_words
    assert plain.key() == "dp-ksa(eps=10,shards=6,delta=0.0001,voter_tokens=4,keyword_first=false)"
    assert parse_mechanism(plain.key()) == plain and parse_mechanism(first.key()) == first
    assert parse_mechanism("dp-ksa:eps=1,shards=4,content_words=true").key() == \
        "dp-ksa(eps=1,shards=4,delta=0.0001,content_words=true)"
    requests = [_request(copier, seed=s) for s in range(6)]
    dec = Decoding(temperature=0.8, max_new_tokens=8, min_new_tokens=1)
    for a, b, r in zip(plain.answer(copier, requests, dec), first.answer(copier, requests, dec),
                       requests):
        # the same release (the voters and the test do not see the final step)
        assert b.steps[0] == a.steps[0] and (b.claim, b.tokens_paid) == (a.claim, 0)
        released = a.steps[0]["released"]
        if not released:  # an abstention: the question's own answer, as without the option
            assert b.response_ids == a.response_ids
            continue
        opening = copier.encode(", ".join(released))
        assert list(b.response_ids[:len(opening)]) == opening
        assert len(b.response_ids) <= 8 and [s["token_id"] for s in b.steps[1:]] == \
            list(b.response_ids)
        # the rest is the model's own continuation of the final prompt and the opening,
        # drawn from the request's seed as a plain answer is
        from ctxleak.engine.generation import sample

        prompt = list(r.prompt([keywords_context(released)])) + opening
        again = sample(copier, [prompt], [r.seed], temperature=0.8,
                       max_new_tokens=8 - len(opening), min_new_tokens=0)[0][0]
        assert list(b.response_ids[len(opening):]) == list(again.token_ids)
        assert b.stopped_on_eos == again.stopped_on_eos
    assert any(a.steps[0]["released"] for a in plain.answer(copier, requests, dec))
    # an opening longer than the answer's tokens is cut, and nothing is decoded after it
    short = first.answer(copier, requests, Decoding(temperature=0.8, max_new_tokens=2,
                                                    min_new_tokens=1))
    for b in short:
        if b.steps[0]["released"]:
            assert list(b.response_ids) == \
                copier.encode(", ".join(b.steps[0]["released"]))[:2]
            assert not b.stopped_on_eos
    with pytest.raises(ConfigError, match="^keyword_first: 'yes' is not true or false"):
        DPKSA(eps=1, shards=4, keyword_first="yes")
