"""Context Influence Decoding as one Mechanism among the defences: its answers are the engine's
CID responses for the same prompts and seeds (ledger carried), its claims follow Thm B.1 (ε per
token × released tokens under any replacement of the context; nothing at λ = 0; none for plain
CID), its key parses back, and every consumer's setting names it: an influence Setting without
another mechanism is CID at its λ and ε. Also: the one ledger record (influence follows from the
two log-probabilities) and the DP mechanisms refusing greedy decoding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.cid_ledgers import cid_ledgers
from helpers.toy_mechanism import FirstDocuments

from ctxleak.engine.pairs import LedgerEntry
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.mechanism_mode import mechanism_list
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.mitigations.cid import CID, CIDConfig, _generate_many
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPVote
from ctxleak.mitigations.ledger import RowLedger
from ctxleak.mitigations.mechanisms import AnswerRequest, Claim, Decoding
from ctxleak.mitigations.named import parse_mechanism
from ctxleak.mitigations.prompts import document_parts

DOCS = ("the capital is paris .", "rome is in italy .", "the sea is blue .")


def _request(lm, seed=0):
    def prompt(texts):
        return lm.encode(" ".join([*texts, "question : what is the capital ? answer :"]))

    return AnswerRequest(documents=DOCS, prompt=prompt, seed=seed)


@pytest.mark.parametrize("lam, eps, greedy", [(0.5, None, False), (1.0, 0.8, False),
                                              (0.3, None, True)])
def test_an_answer_is_the_engines_cid_response_with_its_ledger(tiny_lm, lam, eps, greedy):
    dec = Decoding(temperature=0.9, max_new_tokens=5, min_new_tokens=2, greedy=greedy)
    requests = [_request(tiny_lm, seed=s) for s in (3, 4)]
    answers = CID(lam, eps).answer(tiny_lm, requests, dec)
    config = CIDConfig(lam=lam, temperature=0.9, max_new_tokens=5, min_new_tokens=2,
                       bounded_eps=eps)
    ledgers = _generate_many(tiny_lm, [(r.prompt(DOCS), r.prompt([]), config, r.seed)
                                       for r in requests], sample=not greedy)
    for answer, ledger in zip(answers, ledgers):
        assert answer.ledger == ledger
        assert list(answer.response_ids) == ledger.response_ids
        assert answer.stopped_on_eos == ledger.stopped_on_eos
        assert [s["token_id"] for s in answer.steps] == [e.token_id for e in ledger.entries]
        assert answer.documents_used == (0, 1, 2)
        if eps is None:  # plain CID at λ > 0: no guarantee, nothing paid
            assert (answer.claim.eps, answer.claim.relation, answer.tokens_paid) == \
                (None, "none", 0)
        else:  # ε per released token (the stopping EOS too), any replacement of the context
            assert answer.tokens_paid == len(ledger.entries)
            assert answer.claim.eps == pytest.approx(eps * len(ledger.entries))
            assert answer.claim.relation == "context"


@pytest.mark.parametrize("greedy", [False, True])
def test_a_setting_asked_from_prompt_parts_is_the_engines_cid_response(llama_lm, greedy):
    config = CIDConfig(lam=0.5, temperature=0.9, max_new_tokens=4, min_new_tokens=1)
    parts, _ = document_parts(llama_lm, DOCS[:1], "what is the capital ?")
    options = InfluenceOptions(max_new_tokens=4, min_new_tokens=1, greedy=greedy)
    asked = options.asked(Setting.cid(0.5, 0.9), parts, DOCS[:1], seed=7)
    cid, request, decoding = asked.mechanism, asked.request, asked.decoding
    assert (cid, decoding) == CIDConfig(lam=0.5, temperature=0.9, max_new_tokens=4,
                                        min_new_tokens=1, greedy=greedy)
    assert (request.prompt(DOCS[:1]), request.prompt([]), request.seed) == \
        (parts.full, parts.empty, 7)
    [answer] = CID(0.5).answer(llama_lm, [request], decoding)
    assert answer.ledger == _generate_many(llama_lm, [(parts.full, parts.empty, config, 7)],
                                           sample=not greedy)[0]


def test_claims_by_hand():
    dec = Decoding(max_new_tokens=20)
    assert CID(0.0).claim(dec).eps == 0.0 and CID(0.0, 2.0).claim(dec).eps == 0.0
    assert CID(0.0).spent(None, 7)[0].eps == 0.0 and CID(0.0).spent(None, 7)[1] == 0
    assert CID(0.5).claim(dec).relation == "none" and CID(0.5).spent(None, 7)[1] == 0
    claim = CID(1.0, 0.5).claim(dec)  # at most 20 released tokens, EOS among them
    assert (claim.eps, claim.relation) == (10.0, "context")
    assert CID(1.0, 0.5).spent(3.5, 7) == (replace(claim, eps=3.5), 7)


def test_key_parses_back_and_bad_settings_are_refused():
    for cid in (CID(), CID(0.5), CID(1.0, 2.0)):
        assert parse_mechanism(cid.key()) == cid
    assert parse_mechanism("cid:lam=0.5,bounded_eps=2") == CID(0.5, 2.0)
    assert CID(0.5).describe() == "CID λ = 0.5" and "bounded CID ε = 2" in CID(1, 2).describe()
    with pytest.raises(ConfigError) as err:
        CID(-0.5)
    assert err.value.param == "lam"
    with pytest.raises(ConfigError) as err:
        CID(1.0, -1.0)
    assert err.value.param == "bounded_eps"


def test_the_influence_run_names_cid_by_its_sweep_not_as_another_mechanism():
    with pytest.raises(ConfigError, match="the run's own decoding") as err:
        mechanism_list("cid:lam=0.5")
    assert err.value.param == "mechanisms" and err.value.also == ("lambda_", "bounded_eps")
    assert "give lambda_ (and bounded_eps) instead" in str(err.value)


def test_the_protocols_defaults_claim_nothing_from_a_ledger_and_sweep_by_no_option():
    # a mechanism without a CID ledger: no guarantee, nothing paid, whatever the ledger composed
    toy = FirstDocuments()
    assert toy.swept_by == () and toy.spent(3.0, 7) == (Claim(None), 0)
    # CID: 0 at λ = 0 (no token paid), the composed ε over the released tokens, else none
    assert CID(0.0).spent(None, 5) == (Claim(0.0, 0.0, "context"), 0)
    assert CID(1.0, 2.0).spent(6.5, 4) == (Claim(6.5, 0.0, "context"), 4)
    assert CID(0.5).spent(None, 4) == (Claim(None), 0)


def test_a_setting_without_another_mechanism_is_cid_at_its_lambda_and_eps():
    plain, bounded = Setting.cid(0.5, 0.8), Setting.cid(1.0, 0.8, None, 2.0)
    assert plain.mechanism == CID(0.5) and bounded.mechanism == CID(1.0, 2.0)
    assert plain.decoded_by_cid and bounded.decoded_by_cid
    assert plain.key == "lambda=0.5,T=0.8,context=all"  # the key a stored run holds
    assert bounded.key == "lambda=1,T=0.8,context=all,eps=2"
    assert Setting.cid(1.0, 0.8).is_baseline and not bounded.is_baseline
    vote = Setting(1.0, 0.8, mechanism=DPVote(eps=2, shards=3))
    assert not vote.decoded_by_cid and not vote.is_baseline
    assert vote.key == "lambda=1,T=0.8,context=all,mechanism=dp-vote(eps=2,shards=3,delta=0.0001)"
    assert Setting.cid(1.0, 0.8) == Setting.cid(1.0, 0.8, added=True)  # added is not part of it


def test_dp_mechanisms_refuse_greedy_decoding(tiny_lm):
    dec = Decoding(max_new_tokens=2, min_new_tokens=0, greedy=True)
    for mech in (DPVote(eps=2, shards=3), DPRAG(eps=2)):
        with pytest.raises(ConfigError, match="samples by its definition") as err:
            mech.answer(tiny_lm, [_request(tiny_lm)], dec)
        assert err.value.param == "greedy"


def test_one_ledger_record_its_influence_follows_from_the_log_probabilities():
    entry = LedgerEntry(step=0, token_id=5, lam=0.5, logp_context=-0.25, logp_empty=-1.5)
    assert entry.influence == 1.25
    assert replace(entry, logp_empty=-0.5).influence == 0.25  # recomputed, never stale
    ledger = RowLedger.from_scores(2, [5, 6], [-0.25, -2.0], [-1.5, -1.0], lam=1.0,
                                   temperature=1.0, stopped_on_eos=True)
    assert ledger.response_ids == [5] and ledger.token_influence == [1.25]
    assert [e.step for e in ledger.entries] == [0, 1] and ledger.influence == 1.25


@pytest.mark.parametrize("broken", [False, True])
def test_bounded_answers_decoded_together_share_one_search_each_step(tiny_lm, monkeypatch,
                                                                     broken):
    """Where the λ_t searches of a step's answers are shared (a GPU; here the CPU by choice),
    each decoding step of four bounded answers with the same ε, λ_max and T runs one search,
    and every ledger is, float for float, the one decoded without sharing; an answer with
    other settings searches alone; a shared search that runs out of GPU memory leaves each
    answer to search alone, with the same ledgers."""
    import ctxleak.mitigations.cid_steps as cid

    config = CIDConfig(lam=1.0, temperature=0.9, max_new_tokens=6, min_new_tokens=3,
                       bounded_eps=0.5)
    other = CIDConfig(lam=1.0, temperature=0.9, max_new_tokens=6, min_new_tokens=3,
                      bounded_eps=2.0)
    requests = [_request(tiny_lm, seed=s) for s in (3, 4, 5, 6, 7)]
    jobs = [(r.prompt(DOCS[:k + 1]), r.prompt([]), config if k < 4 else other, r.seed)
            for k, r in enumerate(requests)]
    alone = cid_ledgers(tiny_lm, jobs)
    real, calls = cid.bounded_lambda_rows, []

    def counted(zc, ze, *args):
        calls.append(len(zc))
        if broken and len(zc) > 1:
            raise torch.cuda.OutOfMemoryError("the stacked rows do not fit")
        return real(zc, ze, *args)

    monkeypatch.setattr(cid, "bounded_lambda_rows", counted)
    monkeypatch.setattr(cid, "SEARCH_TOGETHER_ON", frozenset({"cpu"}))
    shared = cid_ledgers(tiny_lm, jobs)
    assert shared == alone
    assert calls and set(calls) == {4}  # the fifth answer's ε differs: it searches alone
    assert any(0 < e.lam < 1 for ledger in alone for e in ledger.entries)
