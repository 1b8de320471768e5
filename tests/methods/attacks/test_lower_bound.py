"""An attack's ε lower bound ("Auditing Differentially Private Machine Learning: How Private is
Private SGD?"): the Clopper–Pearson bound computed by hand on both sides, no signal giving 0, the
threshold chosen on one half of the trials and measured on the other (choosing on the measured
trials would inflate it), and the law."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.lower_bound import (
    HOLDS,
    NO_GUARANTEE,
    VIOLATED,
    audit_scores,
    choose_threshold,
    clopper_pearson,
    eps_lower_bound,
    law,
)


def test_perfect_attack_bound_by_hand():
    # 20 of 20 in, 0 of 20 out: the exact 95 % interval's one-sided ends are 0.025^(1/20) and
    # 1 - 0.025^(1/20), and both inequalities give the same log ratio
    lo = 0.025 ** (1 / 20)
    out = eps_lower_bound(20, 20, 0, 20, 0.95)
    assert out["tpr_ci"][0] == pytest.approx(lo, rel=1e-9)
    assert out["fpr_ci"][1] == pytest.approx(1 - lo, rel=1e-9)
    assert out["eps_lower"] == pytest.approx(math.log(lo / (1 - lo)), rel=1e-9)
    assert (out["tpr"], out["fpr"]) == (1.0, 0.0)


def test_bound_from_the_complement_side():
    # a test that rarely fires on either side but never falsely: TPR 0.3, FPR 0 on 200 trials
    # each. TPR_lo / FPR_hi wins here; the complement side is log((1 - FPR_hi)/(1 - TPR_lo))
    out = eps_lower_bound(60, 200, 0, 200, 0.95)
    fpr_hi = 1 - 0.025 ** (1 / 200)
    assert out["fpr_ci"][1] == pytest.approx(fpr_hi, rel=1e-9)
    tpr_lo = out["tpr_ci"][0]
    assert 0.23 < tpr_lo < 0.3
    assert out["eps_lower"] == pytest.approx(
        max(math.log(tpr_lo / fpr_hi), math.log((1 - fpr_hi) / (1 - tpr_lo))), rel=1e-9)
    assert out["from"] == "TPR/FPR"
    # the mirror test (fires on almost everything, misses 0 of the in trials' complement)
    mirror = eps_lower_bound(200, 200, 140, 200, 0.95)
    assert mirror["from"] == "TNR/FNR"
    assert mirror["eps_lower"] == pytest.approx(out["eps_lower"], rel=1e-9)


def test_no_signal_gives_zero():
    out = eps_lower_bound(10, 20, 10, 20)
    assert out["eps_lower"] == 0.0 and out["from"] is None


def test_threshold_chosen_on_one_half_measured_on_the_other():
    rng = np.random.default_rng(0)
    coins = (rng.random(41) < 0.5).tolist()
    scores = rng.normal(size=41).tolist()
    out = audit_scores(scores, coins, seed=3)
    n_in = sum(coins)
    # half of each side of the coin (rounded down) chooses, the rest measures
    assert out["n_in"] == n_in - n_in // 2 and out["n_out"] == (41 - n_in) - (41 - n_in) // 2
    assert len(out["measured"]) == out["n_in"] + out["n_out"]
    assert out["split_seed"] == 3
    # the other half chose the threshold: it is the choice made on those 20 trials alone
    select = sorted(set(range(41)) - set(out["measured"]))
    assert out["threshold"] == choose_threshold([scores[i] for i in select],
                                                [coins[i] for i in select])
    fixed = audit_scores(scores, coins, threshold=0.0)
    assert fixed["n_in"] + fixed["n_out"] == 41 and fixed["split_seed"] is None


def test_threshold_picked_on_the_measured_trials_would_inflate():
    # pure noise scores: picking the best of many thresholds on the measured trials themselves
    # finds a spurious bound for some seed; the split audit never does
    inflated, honest = [], []
    for seed in range(12):
        rng = np.random.default_rng(seed)
        coins = (rng.random(60) < 0.5).tolist()
        scores = rng.integers(0, 12, size=60).tolist()
        t = choose_threshold(scores, coins, confidence=0.5)
        s, c = np.asarray(scores), np.asarray(coins)
        tp, fp = int(((s >= t) & c).sum()), int(((s >= t) & ~c).sum())
        inflated.append(eps_lower_bound(tp, int(c.sum()), fp, int((~c).sum()), 0.5)["eps_lower"])
        honest.append(audit_scores(scores, coins, seed=seed, confidence=0.5)["eps_lower"])
    assert max(inflated) > 0.3
    assert sum(h > 0 for h in honest) < sum(i > 0 for i in inflated)


def test_law():
    assert law(0.5, None) == NO_GUARANTEE
    assert law(0.5, 0.5) == HOLDS and law(0.6, 0.5) == VIOLATED


def test_clopper_pearson_ends_by_hand():
    # 0 of 10: the lower end is 0 and the upper solves (1 - p)^10 = 0.025; 10 of 10 mirrors it
    assert clopper_pearson(0, 10, 0.95) == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)), rel=1e-9)
    assert clopper_pearson(10, 10, 0.95) == pytest.approx((0.025 ** (1 / 10), 1.0), rel=1e-9)
    assert clopper_pearson(0, 0, 0.95) == (0.0, 1.0)


def test_bad_confidence_and_scores_are_refused():
    for confidence in (0.0, 1.0, 1.5):
        with pytest.raises(ConfigError, match="confidence"):
            eps_lower_bound(1, 2, 0, 2, confidence)
    with pytest.raises(ConfigError, match="one length"):
        audit_scores([1.0, 2.0], [True])
