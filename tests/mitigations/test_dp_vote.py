"""DPVoteRAG and DPSparseVoteRAG (ctxleak.mitigations.dp_vote) on a tiny model: the composed
claim recomputed by hand, what each step paid, the sparse vote's free steps, the vote read from
the shards, the seeded noise, and one-line errors on bad input."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from ctxleak.errors import ConfigError
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding

DOCS = ("paris is the capital of france", "rome is the capital of italy",
        "berlin is the capital of germany", "madrid is the capital of spain")


def _request(lm, docs=DOCS, seed=0, ignore_docs=False):
    def prompt(texts):
        context = "" if ignore_docs else " ".join(texts)
        return lm.encode(f"{context} question : what is the capital ? answer :".strip())

    return AnswerRequest(documents=tuple(docs), prompt=prompt, seed=seed)


def test_vote_claim_by_hand():
    # 0.5 per token, 2 in all: 4 votes, δ 1e-4 split into 4 steps of 2.5e-5
    b = DPVote(eps=2, shards=3, eps_token=0.5).budget(Decoding(max_new_tokens=50))
    assert (b.votes, b.eps_token, b.delta_step) == (4, 0.5, 2.5e-5)
    assert (b.claim.eps, b.claim.delta, b.claim.relation) == (2.0, 1e-4, "shard")
    # default ε per token: eps / min(max_new_tokens, 10); a short response caps the votes
    b = DPVote(eps=2, shards=3).budget(Decoding(max_new_tokens=5, min_new_tokens=0))
    assert b.votes == 5 and b.eps_token == pytest.approx(0.4) and b.claim.eps == pytest.approx(2)
    # 0.75 per token into 2: floor(2.67) = 2 votes, claim 1.5
    b = DPVote(eps=2, shards=3, eps_token=0.75).budget(Decoding())
    assert b.votes == 2 and b.claim.eps == pytest.approx(1.5) and b.delta_step == 5e-5


def test_sparse_claim_by_hand():
    # a paid token: 0.5 (vote) + 0.25 (its sparse-vector round): floor(3 / 0.75) = 4 paid
    b = DPSparseVote(eps=3, shards=3, eps_token=0.5, eps_svt=0.25, delta=1e-3).budget(Decoding())
    assert (b.votes, b.delta_step) == (4, 2.5e-4)
    assert b.claim.eps == pytest.approx(3.0) and b.claim.delta == pytest.approx(1e-3)
    # 2.9 / 0.75 = 3.87: three paid tokens, 2.25 claimed
    b = DPSparseVote(eps=2.9, shards=3, eps_token=0.5, eps_svt=0.25).budget(Decoding())
    assert b.votes == 3 and b.claim.eps == pytest.approx(2.25)
    # defaults: eps / 6 each: three paid tokens
    b = DPSparseVote(eps=6, shards=3).budget(Decoding())
    assert (b.votes, b.eps_token, b.eps_svt, b.claim.eps) == (3, 1.0, 1.0, 6.0)


def _spent(answer):
    return sum(s["eps_step"] for s in answer.steps)


def test_vote_pays_every_vote_and_no_more(tiny_lm):
    mech = DPVote(eps=3, shards=3, eps_token=1)
    dec = Decoding(max_new_tokens=6, min_new_tokens=6)
    for answer in mech.answer(tiny_lm, [_request(tiny_lm, seed=s) for s in range(3)], dec):
        paid = [s["paid"] for s in answer.steps]
        assert paid == [True] * 3 + [False] * (len(paid) - 3)
        assert answer.tokens_paid == 3
        assert _spent(answer) == pytest.approx(answer.claim.eps) == pytest.approx(3.0)
        assert all(s["token_id"] == t for s, t in zip(answer.steps, answer.response_ids))
        # after the budget: the no-retrieval token, free
        assert all(s["token_id"] == s["no_retrieval_token"] for s in answer.steps[3:])


def test_sparse_pays_nothing_where_the_voters_agree_with_no_retrieval(tiny_lm):
    """Voters whose prompts equal the no-retrieval prompt all vote its token: with a sharp
    sparse-vector test no step pays, and the response is the no-retrieval greedy answer."""
    mech = DPSparseVote(eps=600, shards=4, eps_token=100, eps_svt=100)
    dec = Decoding(max_new_tokens=8, min_new_tokens=8)
    answers = mech.answer(tiny_lm, [_request(tiny_lm, seed=s, ignore_docs=True)
                                    for s in range(4)], dec)
    for answer in answers:
        # one round opened at the first step and never ended: its ε_svt (100) is spent there
        assert answer.tokens_paid == 0 and answer.rounds_opened == 1
        assert _spent(answer) == answer.eps_used == 100
        assert [s["eps_step"] for s in answer.steps] == [100] + [0] * 7
        for step in answer.steps:
            assert step["agree"] == 4 and not step["paid"] and step["round"] == 0
            assert step["token_id"] == step["no_retrieval_token"]


def test_sparse_free_steps_release_the_no_retrieval_token(tiny_lm):
    mech = DPSparseVote(eps=4, shards=4, eps_token=1, eps_svt=1, threshold=0.75)
    dec = Decoding(max_new_tokens=10, min_new_tokens=10)
    answers = mech.answer(tiny_lm, [_request(tiny_lm, seed=s) for s in range(6)], dec)
    assert any(a.tokens_paid for a in answers)
    for answer in answers:
        assert answer.tokens_paid <= 2
        # ε_token per paid vote, ε_svt per round opened (the last one may be open)
        assert answer.rounds_opened - answer.tokens_paid in (0, 1)
        assert _spent(answer) == pytest.approx(answer.tokens_paid + answer.rounds_opened)
        for step in answer.steps:
            if not step["paid"]:
                assert step["token_id"] == step["no_retrieval_token"]
                assert step["eps_step"] in (0, 1)  # ε_svt where it opened a round


@dataclass(frozen=True)
class _PaysOn(DPSparseVote):
    """A sparse vote whose sparse-vector test pays on the tests numbered in ``PAYS`` (counted
    from 0 across the answer), whatever the votes."""

    PAYS: ClassVar[list[int]] = []
    tests: ClassVar[list[int]] = [0]

    def pays(self, agree, eps_svt, generator, rho):
        self.tests[0] += 1
        return self.tests[0] - 1 in self.PAYS


def test_sparse_records_every_round_it_opened_an_open_last_round_included(tiny_lm):
    """Tests pay at steps 1 and 3 of 6 (ε_token 0.5, ε_svt 0.25, 4 paid votes allowed):
    rounds 0 (steps 0-1), 1 (steps 2-3) and 2 (steps 4-5, open when the answer ends). By hand:
    2 paid votes, 3 rounds, ε used 2·0.5 + 3·0.25 = 1.75, each round's 0.25 on the step that
    opens it (the records said 2·0.75 = 1.5 before, the open round's 0.25 nowhere); the claim
    (4·0.75 = 3) is what the answer may spend."""
    _PaysOn.PAYS[:], _PaysOn.tests[0] = [1, 3], 0
    mech = _PaysOn(eps=3, shards=3, eps_token=0.5, eps_svt=0.25)
    answer = mech.answer(tiny_lm, [_request(tiny_lm)], Decoding(max_new_tokens=6,
                                                                min_new_tokens=6))[0]
    assert [s["round"] for s in answer.steps] == [0, 0, 1, 1, 2, 2]
    assert [s["paid"] for s in answer.steps] == [False, True] * 2 + [False] * 2
    assert [s["eps_step"] for s in answer.steps] == [0.25, 0.5, 0.25, 0.5, 0.25, 0.0]
    assert (answer.tokens_paid, answer.rounds_opened) == (2, 3)
    assert answer.eps_used == pytest.approx(1.75) and answer.claim.eps == pytest.approx(3.0)
    # the plain vote has no rounds
    plain = DPVote(eps=3, shards=3, eps_token=1).answer(
        tiny_lm, [_request(tiny_lm)], Decoding(max_new_tokens=4, min_new_tokens=4))[0]
    assert plain.rounds_opened == 0 and plain.eps_used == pytest.approx(3.0)


def _first_logits(lm, ids):
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]))
    return out.logits[0, -1].double()


def test_a_sharp_vote_releases_the_plurality_of_the_shards(tiny_lm):
    """ε per token so large that the noise vanishes: the first token is the voters'
    plurality when it leads the runner-up by more than the gap (2 + 0.002·ln(1e6) votes),
    each voter reading its own document; otherwise the vote abstains."""
    req = _request(tiny_lm)
    mech = DPVote(eps=2000, shards=4, eps_token=1000, delta=1e-6)
    answer = mech.answer(tiny_lm, [req], Decoding(max_new_tokens=1, min_new_tokens=1))[0]
    votes = [int(torch.argmax(_first_logits(tiny_lm, req.prompt([d])))) for d in DOCS]
    counts = torch.bincount(torch.tensor(votes), minlength=tiny_lm.vocab_size)
    top, second = torch.sort(counts, descending=True).values[:2].tolist()
    step = answer.steps[0]
    assert step["top_votes"] == top and step["gap"] == pytest.approx(2 + 0.002 * math.log(1e6))
    if top - second >= 3:
        assert step["source"] == "vote" and step["token_id"] == int(torch.argmax(counts))
    else:  # abstained: the no-retrieval token released
        assert step["source"] == "abstained"
        empty = int(torch.argmax(_first_logits(tiny_lm, req.prompt([]))))
        assert step["token_id"] == empty == step["no_retrieval_token"]


def test_unanimous_sharp_voters_release_their_token(tiny_lm):
    """Every voter reads the same prompt: 4 votes against a gap of 2.03 — released."""
    req = _request(tiny_lm, ignore_docs=True)
    mech = DPVote(eps=3000, shards=4, eps_token=1000, delta=1e-6, abstain="stop")
    answer = mech.answer(tiny_lm, [req], Decoding(max_new_tokens=3, min_new_tokens=3))[0]
    assert [s["source"] for s in answer.steps] == ["vote"] * 3
    assert all(s["top_votes"] == 4 for s in answer.steps)


def test_abstain_stop_ends_the_response(tiny_lm):
    # 0.01 per token: the gap is ~ 2 + 200·ln(1e4) votes: two voters always abstain
    mech = DPVote(eps=0.02, shards=3, eps_token=0.01, abstain="stop")
    answer = mech.answer(tiny_lm, [_request(tiny_lm)], Decoding())[0]
    assert answer.response_ids == () and answer.stopped_on_eos
    assert answer.tokens_paid == 1 and answer.steps[0]["source"] == "abstained"


def test_noise_is_seeded_per_request(tiny_lm):
    mech = DPSparseVote(eps=6, shards=3, threshold=1.0)
    dec = Decoding(max_new_tokens=8, min_new_tokens=8)
    reqs = [_request(tiny_lm, seed=s) for s in (11, 12, 13)]
    together = mech.answer(tiny_lm, reqs, dec)
    alone = [mech.answer(tiny_lm, [r], dec)[0] for r in reqs]
    again = mech.answer(tiny_lm, reqs, dec)
    for a, b, c in zip(together, alone, again):
        assert a.response_ids == b.response_ids == c.response_ids
        assert [s["paid"] for s in a.steps] == [s["paid"] for s in b.steps]


@pytest.mark.parametrize("kwargs,param", [
    ({"eps": 0, "shards": 3}, "eps"),
    ({"eps": -1, "shards": 3}, "eps"),
    ({"eps": math.inf, "shards": 3}, "eps"),
    ({"eps": 1, "shards": 3, "delta": 0}, "delta"),
    ({"eps": 1, "shards": 3, "delta": 1}, "delta"),
    ({"eps": 1, "shards": 2}, "shards"),
    ({"eps": 1, "shards": 3, "eps_token": 0}, "eps_token"),
    ({"eps": 1, "shards": 3, "domain": 0}, "domain"),
    ({"eps": 1, "shards": 3, "abstain": "halt"}, "abstain"),
])
def test_bad_parameters_name_the_parameter(kwargs, param):
    for cls in (DPVote, DPSparseVote):
        with pytest.raises(ConfigError) as info:
            cls(**kwargs)
        assert info.value.param == param and "\n" not in str(info.value)


def test_sparse_bad_threshold():
    with pytest.raises(ConfigError) as info:
        DPSparseVote(eps=1, shards=3, threshold=0)
    assert info.value.param == "threshold"


def test_a_token_dearer_than_the_budget():
    with pytest.raises(ConfigError) as info:
        DPVote(eps=1, shards=3, eps_token=2).budget(Decoding())
    assert info.value.param == "eps_token"


def test_too_many_shards_or_one_document(tiny_lm):
    with pytest.raises(ConfigError) as info:
        DPVote(eps=1, shards=5).answer(tiny_lm, [_request(tiny_lm)], Decoding())
    assert info.value.param == "shards" and "5 shards" in str(info.value)
    with pytest.raises(ConfigError) as info:
        DPSparseVote(eps=1, shards=3).answer(tiny_lm, [_request(tiny_lm, DOCS[:1])], Decoding())
    assert info.value.param == "documents"


def test_keys_name_the_setting():
    assert DPVote(eps=2, shards=4).key() == "dp-vote(eps=2,shards=4,delta=0.0001)"
    assert DPSparseVote(eps=8, shards=4, eps_token=2).key() == (
        "dp-sparse-vote(eps=8,shards=4,threshold=0.5,delta=0.0001,eps_token=2)")
