"""An attack's ε lower bound ("Auditing Differentially Private Machine Learning: How Private is
Private SGD?"): the Clopper–Pearson bound computed by hand on both sides, no signal giving 0, the
threshold chosen on one half of the trials and measured on the other (choosing on the measured
trials would inflate it), and the law."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, norm

from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.lower_bound import (
    HOLDS,
    NO_GUARANTEE,
    VIOLATED,
    auc_min_detectable,
    audit_scores,
    candidate_thresholds,
    choose_rule,
    choose_threshold,
    clopper_pearson,
    documents_needed,
    eps_lower_bound,
    eps_max_showable,
    joint_confidence,
    law,
    power_verdict,
)
from ctxleak.methods.attacks.roc import covers, roc_summary


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
    out = audit_scores(scores, coins, seed=3, rule="split-half")
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
    assert fixed["threshold_rule"] == "fixed" and fixed["bound_confidence"] == 0.95


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


def bound_by_hand(tp: int, n_in: int, fp: int, n_out: int, alpha: float) -> float:
    """The ε lower bound from the Beta quantiles, each end one-sided at α/2."""
    lo = 0.0 if tp == 0 else float(beta.ppf(alpha / 2, tp, n_in - tp + 1))
    hi = 1.0 if fp == n_out else float(beta.ppf(1 - alpha / 2, fp + 1, n_out - fp))
    sides = [math.log(lo / hi) if lo > 0 else 0.0,
             math.log((1 - hi) / (1 - lo)) if 1 - hi > 0 else 0.0]
    return max(0.0, *sides)


def test_all_trials_rule_by_hand():
    # 30 + 30 trials, scores on a grid of 0..5: the 5 candidates (the distinct scores above the
    # lowest) each bounded on all 60 trials at 1 − 0.05/5, the largest kept
    rng = np.random.default_rng(1)
    coins = [True] * 30 + [False] * 30
    scores = [int(min(5, max(0, round(x)))) for x in rng.normal(1.5, 1.0, 60) + 2.5 *
              np.asarray(coins)]
    out = audit_scores(scores, coins, rule="all-trials")
    grid = sorted(set(scores))[1:]
    assert candidate_thresholds(scores) == grid and out["candidates"] == len(grid)
    assert out["bound_confidence"] == pytest.approx(1 - 0.05 / len(grid), abs=1e-15)
    assert out["confidence"] == 0.95 and out["n_in"] + out["n_out"] == 60
    want = max(bound_by_hand(sum(s >= t for s, c in zip(scores, coins) if c), 30,
                             sum(s >= t for s, c in zip(scores, coins) if not c), 30,
                             0.05 / len(grid)) for t in grid)
    assert want > 0 and out["eps_lower"] == pytest.approx(want, abs=1e-12)
    # more distinct scores than the cap: that many of them, evenly spaced, the lowest left out
    many = candidate_thresholds(list(range(100)), 20)
    assert len(many) == 20 and many[0] == 1.0 and many[-1] == 99.0


def test_power_of_a_perfect_attack_by_hand():
    # the split-half rule: 15 documents (8 + 7) measure 4 + 4: 0.025^(1/4) < 1/2, nothing shows
    assert eps_max_showable(8, 7, rule="split-half") == 0.0
    # 25 documents (13 + 12) measure 7 + 6
    lo, hi = 0.025 ** (1 / 7), 1 - 0.025 ** (1 / 6)
    assert eps_max_showable(13, 12, rule="split-half") == pytest.approx(
        max(math.log(lo / hi), math.log((1 - hi) / (1 - lo))), abs=1e-12)
    # the all-trials rule with 4 candidates: all 13 + 12 at 1 − 0.05/4
    a = 0.05 / 4 / 2
    lo, hi = a ** (1 / 13), 1 - a ** (1 / 12)
    assert eps_max_showable(13, 12, rule="all-trials", candidates=4) == pytest.approx(
        max(math.log(lo / hi), math.log((1 - hi) / (1 - lo))), abs=1e-12)
    # the verdicts: nothing shown and nothing showable, nothing shown, something shown
    none = power_verdict(0.0, 0.0, 8, 7, 0.95)
    assert none.startswith("Not shown: a bound of 0 means the attack did not show a leak, "
                           "not that there is none") and "with 15 documents" in none
    assert "no attack could show ε > 0" in none
    weak = power_verdict(0.0, 2.3, 40, 40, 0.95)
    assert "a perfect attack could have shown ε ≥ 2.3 nats" in weak
    shown = power_verdict(0.41, 2.3, 40, 40, 0.95, attacks=3, best="mask")
    assert shown == ("ε ≥ 0.41 nats shown (joint confidence 95 % over 3 attacks, by the mask "
                     "attack); with 40 members and 40 non-members no attack could show more "
                     "than 2.3 nats.")


def test_the_rule_is_chosen_from_the_counts_alone():
    # two attacks with the same counts and candidates but different scores get the same rule
    coins = [True] * 20 + [False] * 20
    strong = audit_scores([2.0] * 20 + [1.0] * 10 + [0.0] * 10, coins)
    noise = audit_scores([0.0, 1.0, 2.0, 1.0] * 10, coins)
    assert strong["candidates"] == noise["candidates"] == 2
    assert strong["threshold_rule"] == noise["threshold_rule"] == choose_rule(20, 20, 0.95, 2)
    # at many candidates and large counts the split half can win
    assert choose_rule(5000, 5000, 0.95, 10 ** 6) == "split-half"
    assert joint_confidence(0.95, 3) == pytest.approx(1 - 0.05 / 3, abs=1e-15)


def test_all_trials_shows_more_than_split_half_on_a_separating_attack():
    # members N(2, 1), non-members N(0, 1), scores on a 0.1 grid: 120 trials, 20 seeds
    split, every = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        coins = np.array([True] * 60 + [False] * 60)
        scores = np.round(rng.normal(size=120) + 2.0 * coins, 1).tolist()
        split.append(audit_scores(scores, coins.tolist(), seed=seed,
                                  rule="split-half")["eps_lower"])
        every.append(audit_scores(scores, coins.tolist(), seed=seed)["eps_lower"])
    assert np.mean(every) > np.mean(split) + 0.2


def test_documents_needed_is_the_fewest_where_the_criterion_is_not_monotone():
    # TPR 0.85, FPR 0.25, split-half: the bisection this replaced answered 57
    def shows(n: int) -> bool:
        heads, tails = (n + 1) // 2, n // 2
        k, j = heads - heads // 2, tails - tails // 2
        return eps_lower_bound(round(0.85 * k), k, round(0.25 * j), j)["eps_lower"] > 0

    found = [n for n in range(2, 80) if shows(n)]
    assert found[0] == 50
    assert any(n + 1 not in found for n in found if n < 70)  # shown at n, not at n + 1
    assert documents_needed(0.85, 0.25, rule="split-half") == 50
    # the all-trials rule with m candidates, against a scan of the scalar bound
    def shows_all(n: int, m: int) -> bool:
        k, j = (n + 1) // 2, n // 2
        return bound_by_hand(round(0.8 * k), k, round(0.1 * j), j, 0.05 / m) > 0

    need = documents_needed(0.8, 0.1, rule="all-trials", candidates=5)
    assert need is not None and shows_all(need, 5)
    assert not any(shows_all(n, 5) for n in range(2, need))
    assert documents_needed(0.5, 0.5) is None


def test_auc_min_detectable_by_hand():
    # the null standard deviation of the Mann–Whitney AUC, √((n₁ + n₀ + 1) / (12 n₁ n₀)),
    # times the one-sided normal quantile
    assert auc_min_detectable(40, 40, 0.95) == pytest.approx(
        norm.ppf(0.95) * math.sqrt(81 / (12 * 1600)), abs=1e-12)
    assert auc_min_detectable(0, 5) is None
    # an AUC that far above ½ is where the approximate one-sided p-value reaches α
    d = auc_min_detectable(30, 50, 0.99)
    assert d is not None
    z = d / math.sqrt((30 + 50 + 1) / (12 * 30 * 50))
    assert norm.sf(z) == pytest.approx(0.01, abs=1e-12)


@pytest.mark.parametrize("seed", [0])
def test_shuffled_labels_show_nothing(seed: int):
    """The null check: a strong attack's scores against labels shuffled at random, 20 seeded
    shuffles: the ε bound is 0 and the AUC interval covers ½ in at least 19 (95 %)."""
    rng = np.random.default_rng(seed)
    labels = np.array([True] * 30 + [False] * 30)
    scores = np.round(rng.normal(size=60) + 3.0 * labels, 1)
    assert roc_summary(scores, labels, resamples=500)["eps"]["eps_lower"] > 1  # real signal
    clean = 0
    for shuffle in range(20):
        shuffled = np.random.default_rng(1000 + shuffle).permutation(labels)
        out = roc_summary(scores, shuffled, seed=shuffle, resamples=500)
        clean += out["eps"]["eps_lower"] == 0 and covers(out["auc_ci"], 0.5)
    assert clean >= 19
