"""The canary audit on the real default model: a broken mechanism (it records ε = 0.01 per
token but decodes at λ = 1) is caught by the law, and bounded CID's lower bound sits under its
guarantee ("Auditing Differentially Private Machine Learning: How Private is Private SGD?";
bounded CID: "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
App. B)."""

from __future__ import annotations

import pytest

import ctxleak
from ctxleak.methods.influence.canary import HOLDS, VIOLATED, summarize_trials
from ctxleak.methods.influence.canary_method import CanaryMethod, CanaryParams
from ctxleak.methods.influence.cid import CIDConfig
from ctxleak.run.options import RunOptions

# short documents keep the prompts small; the canary sentence comes first
DOCS = [{"id": f"d{i}", "context": c, "query": ""} for i, c in enumerate((
    "Customer file.", "Billing record.", "Support ticket.", "Bank letter."))]
TRIALS, TOKENS, T, THRESHOLD = 16, 8, 0.5, 3


@pytest.mark.integration
def test_the_law_catches_a_broken_mechanism_and_holds_for_bounded_cid(default_lm, tmp_path):
    plain = CIDConfig(lam=1.0, temperature=T, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
    method = CanaryMethod(RunOptions(seed=0), CanaryParams(plain, trials=TRIALS,
                                                           threshold=THRESHOLD))
    trials = method.plan(DOCS).items
    records = method.measure(default_lm, default_lm, trials)
    # the broken mechanism: plain decoding at λ = 1 that claims ε = 0.01 per released token
    claimed = [{**r, "composed_eps": 0.01 * r["released_tokens"]} for r in records]
    broken = summarize_trials(claimed, threshold=THRESHOLD)
    assert broken["eps_guarantee"] == pytest.approx(0.01 * TOKENS)
    assert broken["law"] == VIOLATED, broken
    assert broken["eps_lower"] > broken["eps_guarantee"]
    # the same trials under bounded CID at ε = 0.5 per token: 4 nats per response guaranteed
    bounded = ctxleak.canary_audit(default_lm, DOCS, bounded_eps=0.5, temperature=T,
                                   trials=TRIALS, max_new_tokens=TOKENS, threshold=THRESHOLD,
                                   output=str(tmp_path / "bounded"))
    s = bounded.summary
    assert s["eps_guarantee"] == pytest.approx(0.5 * TOKENS)
    assert s["law"] == HOLDS and s["eps_lower"] <= s["eps_guarantee"]
    assert [r["canary"] for r in bounded.records] == [t.canary for t in trials]
