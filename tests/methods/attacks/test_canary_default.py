"""The canary audit on the real default model: a broken mechanism (it records ε = 0.01 per
token but decodes at λ = 1) is caught by the law, and bounded CID's lower bound sits under its
guarantee ("Auditing Differentially Private Machine Learning: How Private is Private SGD?";
bounded CID: "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
App. B). Both settings' trials are drawn in one batched call. The bounded setting runs only 2
trials of 4 tokens (enough for its guarantee's accounting and the law; far too few to show a
leak): Algorithm 1 cost about 0.5 s per trial and decoding step on the 2-core CPU (measured with
its 41-pass bisection; the λ_t search now takes about 4 passes). docs/methods/influence.md
shows the bounded settings with 40 trials each."""

from __future__ import annotations

import pytest

from ctxleak.methods.attacks.canary import plant_canaries, summarize_trials
from ctxleak.methods.attacks.canary_method import measure_trials
from ctxleak.methods.attacks.lower_bound import HOLDS, VIOLATED
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.cid import CIDConfig

# short documents keep the prompts small; the canary sentence comes first
DOCS = [{"id": f"d{i}", "context": c} for i, c in enumerate((
    "Customer file.", "Billing record.", "Support ticket.", "Bank letter."))]
# THRESHOLD: 4 of the canary's 6 digits repeated, in any order (a tails response repeats up
# to 3 of them by chance: the other canary shares digits with it)
# TRIALS: 64 catch the broken mechanism whatever the draw (measured over four seeds: ε lower
# bounds 0.26 to 1.12 against its claim of 0.1; 16 trials caught it under one draw and not another)
TRIALS, TOKENS, T, THRESHOLD = 64, 10, 0.5, 4
BOUNDED_TRIALS, BOUNDED_TOKENS, EPS = 2, 4, 8.0


@pytest.mark.integration
def test_the_law_catches_a_broken_mechanism_and_holds_for_bounded_cid(default_lm):
    trials = plant_canaries(load_examples(DOCS, task="summarization"), TRIALS, seed=0)
    plain = CIDConfig(lam=1.0, temperature=T, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
    bounded = CIDConfig(lam=1.0, temperature=T, max_new_tokens=BOUNDED_TOKENS,
                        min_new_tokens=BOUNDED_TOKENS, bounded_eps=EPS)
    records = measure_trials(default_lm, trials + trials[:BOUNDED_TRIALS],
                             [plain] * TRIALS + [bounded] * BOUNDED_TRIALS, seed=0)
    # the broken mechanism: plain decoding at λ = 1 that claims ε = 0.01 per released token
    claimed = [{**r, "composed_eps": 0.01 * r["released_tokens"]} for r in records[:TRIALS]]
    broken = summarize_trials(claimed, threshold=THRESHOLD)
    assert broken["eps_guarantee"] == pytest.approx(0.01 * TOKENS)
    assert broken["law"] == VIOLATED, broken
    assert broken["eps_lower"] > broken["eps_guarantee"]  # 0.44 > 0.1: 24 of 32 vs 6 of 32
    # the first trials again under bounded CID at ε = 8 per token: 32 nats per response
    honest = summarize_trials(records[TRIALS:], threshold=THRESHOLD)
    assert honest["n_in"] + honest["n_out"] == BOUNDED_TRIALS
    assert honest["eps_guarantee"] == pytest.approx(EPS * BOUNDED_TOKENS)
    assert honest["law"] == HOLDS and honest["eps_lower"] <= honest["eps_guarantee"]
