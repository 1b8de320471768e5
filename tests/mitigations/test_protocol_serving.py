"""The Mechanism protocol's words the privacy proxy asks (ctxleak.mitigations.mechanisms):
``charge``, ``mode``, ``batch_key``, ``answer_group`` with a listener and ``figures``, as the
defaults give them and as Context Influence Decoding answers them (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded: App. B, Alg. 1)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.toy_mechanism import FirstDocuments

from ctxleak.mitigations.accounting import PureDPEvent
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.losses import events_rdp
from ctxleak.mitigations.mechanisms import AnswerRequest, Asked, Charge, Decoding

DOCS = ("the capital is paris .", "rome is in italy .", "the sea is blue .")


def _request(lm: Any, seed: int = 0, documents: tuple[str, ...] = DOCS) -> AnswerRequest:
    def prompt(texts: Any) -> list[int]:
        return lm.encode(" ".join([*texts, "question : what is the capital ? answer :"]))

    return AnswerRequest(documents=documents, prompt=prompt, seed=seed,
                         ids=tuple(f"d{k}" for k in range(len(documents))))


class Heard:
    """A listener that keeps every announcement in order."""

    def __init__(self) -> None:
        self.said: list[tuple[Any, ...]] = []

    def token(self, k: int, token_id: int, spent: float | None) -> None:
        self.said.append(("token", k, token_id, spent))

    def done(self, k: int, answer: Any) -> None:
        self.said.append(("done", k, answer))


def test_the_charge_of_each_kind_of_defence():
    decoding = Decoding(temperature=1.0, max_new_tokens=7, min_new_tokens=0)
    toy = FirstDocuments(eps=0.5)
    # a claim per answer: its ε, whatever the tokens (0.5 × (7 + 1) for the toy)
    assert toy.charge(decoding) == Charge(per_answer=4.0) and toy.charge(decoding).guaranteed
    # ε per token, and in Rényi DP any ε-DP token's curve
    bounded = CID(1.0, bounded_eps=0.3).charge(decoding)
    assert bounded == Charge(per_token=0.3, events=((PureDPEvent(0.3), 1),))
    # order 2: log((sinh 0.6 − sinh 0.3) / sinh 0.3), below 2 · 0.3² / 2 (Bun and Steinke)
    want = math.log((math.sinh(0.6) - math.sinh(0.3)) / math.sinh(0.3))
    assert events_rdp(bounded.events, 2.0) == pytest.approx(want) and want < 0.09
    plain = CID(0.5).charge(decoding)
    assert plain == Charge(ex_post=True) and not plain.guaranteed
    assert CID(0.0).charge(decoding) == Charge(ex_post=True, reads=False)  # reads nothing
    assert (toy.mode(), CID(0.5).mode(), CID(1.0, 0.3).mode()) == \
        ("mechanism", "lambda", "bounded")
    # every CID answer that samples goes in one batch; a mechanism's by its key and decoding
    assert CID(0.5).batch_key(decoding) == CID(1.0, 0.3).batch_key(
        Decoding(temperature=0.8, max_new_tokens=3))
    assert CID(0.5).batch_key(decoding) != CID(0.5).batch_key(
        Decoding(temperature=1.0, max_new_tokens=7, min_new_tokens=0, greedy=True))
    assert toy.batch_key(decoding) == (toy.key(), decoding)


def test_the_default_group_is_one_answer_call_announced_when_whole(llama_lm):
    toy = FirstDocuments(eps=0.5)
    decoding = Decoding(temperature=0.9, max_new_tokens=4, min_new_tokens=1)
    requests = [_request(llama_lm, seed=s) for s in (1, 2)]
    heard = Heard()
    got = toy.answer_group(llama_lm, [Asked(toy, r, decoding) for r in requests], heard)
    assert got == toy.answer(llama_lm, requests, decoding)
    want = [("token", k, t, None) for k, a in enumerate(got) for t in a.response_ids]
    assert [s for s in heard.said if s[0] == "token"] == want
    assert [(s[1], s[2]) for s in heard.said if s[0] == "done"] == list(enumerate(got))
    figures = toy.figures(got[0], requests[0], decoding)
    assert figures["mechanism"] == toy.key() and figures["documents_used"] == ["d0"]
    assert figures["epsilon"] == toy.claim(decoding).eps  # the claim reserved
    assert figures["epsilon_spent"] == got[0].claim.eps  # what this answer spent
    assert figures["tokens"] == len(got[0].response_ids) + int(got[0].stopped_on_eos)


def test_a_mixed_cid_group_answers_each_as_alone_and_streams_what_each_token_spent(llama_lm):
    """λ 0.5 plain, bounded ε 0.4 and λ 0.3 at another temperature and length in one group: each
    answer's tokens are those of CID.answer alone; plain CID's ledger keeps no ε and each
    step's ex-post ε, announced as the token's spend; bounded CID announces ε per token."""
    settings = [(CID(0.5), Decoding(temperature=0.9, max_new_tokens=5, min_new_tokens=2)),
                (CID(1.0, bounded_eps=0.4), Decoding(temperature=1.0, max_new_tokens=4,
                                                     min_new_tokens=0)),
                (CID(0.3), Decoding(temperature=0.7, max_new_tokens=6, min_new_tokens=6))]
    asked = [Asked(cid, _request(llama_lm, seed=k + 3), dec)
             for k, (cid, dec) in enumerate(settings)]
    heard = Heard()
    got = CID(0.5).answer_group(llama_lm, asked, heard)
    for k, (answer, (cid, dec)) in enumerate(zip(got, settings)):
        r = asked[k].request
        alone = cid_ledger(llama_lm, r.prompt(r.documents), r.prompt([]),
                             CIDConfig(lam=cid.lam, temperature=dec.temperature,
                                       max_new_tokens=dec.max_new_tokens,
                                       min_new_tokens=dec.min_new_tokens,
                                       bounded_eps=cid.bounded_eps), seed=r.seed)
        assert answer.ledger is not None
        assert [e.token_id for e in answer.ledger.entries] == \
            [e.token_id for e in alone.entries]
        spent = [s[3] for s in heard.said if s[0] == "token" and s[1] == k]
        if cid.bounded_eps is None:
            assert answer.ledger.bounded_eps is None and answer.claim.eps is None
            assert all(e.eps is None and e.eps_ex_post > 0 for e in answer.ledger.entries)
            assert spent == [e.eps_ex_post for e in answer.ledger.entries]
            assert cid.figures(answer, r, dec)["epsilon_ex_post"] == \
                pytest.approx(sum(spent))
        else:
            assert spent == [0.4] * len(answer.ledger.entries)
            assert answer.claim.eps == pytest.approx(0.4 * len(answer.ledger.entries))
        # announced once, as soon as it ended: the same tokens, claim and ledger entries
        [done] = [s[2] for s in heard.said if s[0] == "done" and s[1] == k]
        assert (done.response_ids, done.claim, done.ledger.entries) == \
            (answer.response_ids, answer.claim, answer.ledger.entries)


def test_a_claim_is_computed_once_per_mechanism_and_settings(llama_lm):
    """The defaults of ``charge`` and ``figures`` read the claim through ``claim_of``: DP-RAG's
    bisection (about 11 ms) is not repeated for every answer of a deployment."""
    calls: list[Decoding] = []

    class Counted(FirstDocuments):
        def claim(self, decoding: Decoding) -> Any:
            calls.append(decoding)
            return super().claim(decoding)

    toy = Counted(eps=0.25, label="counted")
    decoding = Decoding(temperature=0.9, max_new_tokens=3, min_new_tokens=0)
    [answer] = toy.answer(llama_lm, [_request(llama_lm)], decoding)
    for _ in range(3):
        assert toy.charge(decoding) == Charge(per_answer=0.25 * 4)
        assert toy.figures(answer, _request(llama_lm), decoding)["epsilon"] == 0.25 * 4
    assert calls == [decoding]
    other = Decoding(temperature=0.9, max_new_tokens=5, min_new_tokens=0)
    assert toy.charge(other) == Charge(per_answer=0.25 * 6) and calls == [decoding, other]
