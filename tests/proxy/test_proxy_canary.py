"""The canary audit of a running ``ctxleak serve`` ("Auditing Differentially Private Machine
Learning: How Private is Private SGD?"; ``ctxleak.canary_audit_proxy``) catches a broken variant
of each DP mechanism the proxy deploys and holds for the honest one: DPVoteRAG and
DPSparseVoteRAG (Koga, Wu and Chaudhuri, "Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy"), DP-RAG (Grislain, "RAG with Differential Privacy") and DP-KSA (Tang,
Flemings, Wang and Annavaram, "Differentially Private Retrieval-Augmented Generation"), each broken
variant a test-only subclass whose noisy step adds no noise (:mod:`helpers.broken_dp`, the ones
the default-model audit uses), handed to the proxy as a Mechanism object; and bounded Context
Influence Decoding holds. Every trial's answer is drawn by the proxy, through the real
``openai`` client.

The model is a tiny Llama whose weights are set by hand to repeat the digits of its prompt
(:mod:`helpers.digit_copier`): the random tiny models cannot leak a canary at all (their word
vocabulary has no digits, so every account number is the same unknown token, and random
weights copy nothing), so no audit could tell a broken mechanism from an honest one on them.
Canaries of 3 digits: the broken mechanisms release the two digits their context holds most,
alternately, which shares 2 digits with the target canary when it is planted and rarely when the
other is, so the threshold is fixed in advance at 2 digits (every trial measures).

The guarantee between a trial's two contexts is the proxy's claim per response by group
privacy: the votes and DP-KSA read the canary in each of their 3 shards (3 documents, one a shard), 3 steps;
DP-RAG's one document is replaced, removed then added, 2 steps; bounded CID's claim covers any
replacement of the context, 1 step. The lower bound takes the group's δ off (an (ε, δ)-DP test
has TPR ≤ e^ε·FPR + δ), checked here against that inequality by hand."""

from __future__ import annotations

import math

import pytest
from helpers.broken_dp import NoNoiseDPRAG, NoNoiseKSA, NoNoiseSparseVote, NoNoiseVote
from helpers.digit_copier import digit_copier
from helpers.proxy_server import serving_sqlite

import ctxleak
from ctxleak.engine.generation import derive_seed
from ctxleak.methods.attacks.canary import CANARY_QUERY, plant_canaries
from ctxleak.methods.attacks.lower_bound import HOLDS, VIOLATED
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.dp_ksa import DPKSA
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.prompts import template_prompt

DOCS = [{"id": "d0", "context": "Customer file."}, {"id": "d1", "context": "Billing record."}]
TRIALS, TOKENS, DIGITS, THRESHOLD, SHARDS, EPS = 24, 4, 3, 2, 3, 0.05
DECODING = Decoding(temperature=0.8, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
SPARSE = {"eps": EPS, "shards": SHARDS, "eps_token": EPS / 40, "eps_svt": EPS / 40}
#: (honest, broken, copies of the canary's document per request, group-privacy steps)
CASES = {
    "dp-vote": (DPVote(eps=EPS, shards=SHARDS), NoNoiseVote(eps=EPS, shards=SHARDS), 3, 3),
    # a paid vote for every step (the default of three would cap what even a broken
    # mechanism releases)
    "dp-sparse-vote": (DPSparseVote(**SPARSE), NoNoiseSparseVote(**SPARSE), 3, 3),
    "dp-rag": (DPRAG(eps=EPS), NoNoiseDPRAG(eps=EPS), 1, 2),
    # keyword-space aggregation: the broken variant releases the voters' top keyword untested
    "dp-ksa": (DPKSA(eps=EPS, shards=SHARDS, voter_tokens=TOKENS),
               NoNoiseKSA(eps=EPS, shards=SHARDS, voter_tokens=TOKENS), 3, 3),
}


@pytest.fixture(scope="module")
def lm():
    return digit_copier()


def _audit(lm, path, mechanism, copies, *, deployed=False, **served):
    """The audit of the proxy deploying ``mechanism`` (``served``: more of its settings), and
    its ledger's charge to each trial's documents. By default the audit sends a seed per trial
    to a proxy started for an audit (--audit-seeds), so its answers repeat the mechanism's
    asked directly; ``deployed``: the proxy as deployed, which draws the noise from its own
    secret and refuses a client's seed, and the audit sends none."""
    key = {"api_key_env": "CTXLEAK_PROXY_KEY"} if "api_key" in served else {}
    with serving_sqlite(lm, path, mechanism=mechanism, audit_seeds=not deployed,
                        **served) as (url, ledger, _):
        result = ctxleak.canary_audit_proxy(url + "/v1", "tiny", DOCS, copies=copies,
                                            seeded=not deployed,
                                            trials=TRIALS, digits=DIGITS, temperature=0.8,
                                            max_new_tokens=TOKENS, threshold=THRESHOLD,
                                            concurrency=8, **key)
        charged = {f"{r['id']}/{k}": ledger.document(f"{r['id']}/{k}").spent
                   for r in result.records for k in range(copies)}
    return result, charged


def _bound_by_hand(summary):
    """The (ε, δ) lower bound from the summary's Clopper–Pearson ends, as the default-model
    audit computes it: TPR ≤ e^ε·FPR + δ and 1 − FPR ≤ e^ε·(1 − TPR) + δ."""
    (tpr_lo, _), (_, fpr_hi), delta = summary["tpr_ci"], summary["fpr_ci"], summary["delta"]
    one = math.log((tpr_lo - delta) / fpr_hi) if tpr_lo > delta else 0.0
    other = math.log((1 - fpr_hi - delta) / (1 - tpr_lo)) if 1 - fpr_hi > delta else 0.0
    return max(one, other, 0.0)


@pytest.mark.parametrize("name", list(CASES))
def test_the_audit_through_the_proxy_catches_the_broken_variant(lm, tmp_path, name):
    honest, broken, copies, steps = CASES[name]
    claim = honest.claim(DECODING)
    group_eps = steps * claim.eps
    group_delta = claim.delta * sum(math.exp(i * claim.eps) for i in range(steps))
    out = {}
    for kind, mechanism in (("honest", honest), ("broken", broken)):
        result, charged = _audit(lm, tmp_path / f"{kind}.db", mechanism, copies)
        s = out[kind] = result.summary
        # the guarantee is the claim the proxy answered under, by group privacy
        assert {(r["claim_eps"], r["claim_delta"], r["claim_relation"])
                for r in result.records} == {(claim.eps, claim.delta, claim.relation)}
        assert s["eps_guarantee"] == pytest.approx(group_eps)
        assert s["delta"] == pytest.approx(group_delta)
        assert s["eps_lower"] == pytest.approx(_bound_by_hand(s))
        assert s["n_trials"] == TRIALS and s["threshold_rule"] == "fixed"
        # each trial's documents were charged the claim, once
        assert list(charged.values()) == pytest.approx([claim.eps] * TRIALS * copies)
        # the trials' answers are the mechanism's own, asked directly
        planted = plant_canaries(load_examples(DOCS, task="summarization"), TRIALS, 0, DIGITS)
        first = planted[:3]
        direct = mechanism.answer(lm, [AnswerRequest(
            documents=(t.context,) * copies, seed=derive_seed(0, t.trial),
            prompt=template_prompt(lm, CANARY_QUERY, reserve=TOKENS)) for t in first], DECODING)
        assert [r["response"] for r in result.records[:3]] == \
            [lm.decode(list(a.response_ids)) for a in direct]
    print(f"{name}: guarantee ε = {group_eps:.3g}, δ = {group_delta:.2g}; lower bound broken "
          f"{out['broken']['eps_lower']:.3g} (TP {out['broken']['tp']}/{out['broken']['n_in']},"
          f" FP {out['broken']['fp']}/{out['broken']['n_out']}), honest "
          f"{out['honest']['eps_lower']:.3g}")
    assert out["broken"]["law"] == VIOLATED and out["broken"]["eps_lower"] > group_eps
    assert out["honest"]["law"] == HOLDS and out["honest"]["eps_lower"] <= group_eps
    assert "not as private as it claims" in out["broken"]["reading"]


def test_bounded_cid_through_the_proxy_holds_its_guarantee(lm, tmp_path, monkeypatch):
    """Bounded CID's claim: ε per token over the 4 tokens released (EOS masked before), any
    replacement of the context, so one step between the trial's contexts, δ = 0. The proxy
    asks for an API key, which the audit reads from the environment, as docs/deploy-cid.md's
    call does."""
    monkeypatch.setenv("CTXLEAK_PROXY_KEY", "key-for-the-audit")
    result, charged = _audit(lm, tmp_path / "cid.db", CID(lam=1.0, bounded_eps=EPS), 1,
                             api_key="key-for-the-audit")
    s = result.summary
    assert {r["claim_relation"] for r in result.records} == {"context"}
    assert s["eps_guarantee"] == pytest.approx(EPS * TOKENS) and s["delta"] == 0
    assert list(charged.values()) == pytest.approx([EPS * TOKENS] * TRIALS)
    assert s["law"] == HOLDS and s["eps_lower"] <= EPS * TOKENS


@pytest.mark.parametrize("name", [*CASES, "bounded-cid"])
def test_the_audit_of_each_deployed_proxy_stays_within_its_claim(lm, tmp_path, name):
    """Each DP defence as deployed (no --audit-seeds: the noise is the server's secret, the
    audit sends no seed, and a seed would be refused): the audit's ε lower bound is not above
    the guarantee the proxy's claim gives between a trial's two contexts."""
    if name == "bounded-cid":
        mechanism, copies, steps = CID(lam=1.0, bounded_eps=EPS), 1, 1
        claim_eps, claim_delta = EPS * TOKENS, 0.0
    else:
        mechanism, _, copies, steps = CASES[name]
        claim = mechanism.claim(DECODING)
        claim_eps, claim_delta = claim.eps, claim.delta
    result, _ = _audit(lm, tmp_path / "deployed.db", mechanism, copies, deployed=True)
    s = result.summary
    group_eps = steps * claim_eps
    assert s["eps_guarantee"] == pytest.approx(group_eps)
    assert s["delta"] == pytest.approx(claim_delta * sum(math.exp(i * claim_eps)
                                                         for i in range(steps)))
    assert s["n_trials"] == TRIALS and result.config["seeded"] is False
    print(f"{name} as deployed: lower bound {s['eps_lower']:.3g} (TP {s['tp']}/{s['n_in']}, "
          f"FP {s['fp']}/{s['n_out']}) against its guarantee ε = {group_eps:.3g}")
    assert s["law"] == HOLDS and s["eps_lower"] <= group_eps
