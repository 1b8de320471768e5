"""The membership attacks' ROC statistics ("Membership Inference Attacks From First
Principles"): the AUC against a pair-by-pair count, the ROC and TPR at a fixed FPR counted by
hand, the bootstrap interval's behaviour with and without signal, and bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ctxleak.errors import InputError
from ctxleak.methods.attacks.lower_bound import audit_scores, clopper_pearson
from ctxleak.methods.attacks.roc import (
    auc,
    auc_interval,
    auc_test,
    covers,
    roc_points,
    roc_summary,
    tpr_at_fpr,
)


def pairwise_auc(scores: list[float], labels: list[bool]) -> float:
    """The definition: over every (member, non-member) pair, 1 if the member scores higher,
    1/2 if equal."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    total = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return total / (len(pos) * len(neg))


def test_auc_small_case_by_hand() -> None:
    # members 0.9, 0.7; non-members 0.8, 0.6: 0.9 beats both, 0.7 beats 0.6 only -> 3/4
    assert auc([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == pytest.approx(0.75)
    # ties count one half: member 1 vs non-members 1, 0 -> (0.5 + 1) / 2
    assert auc([1, 1, 0], [True, False, False]) == pytest.approx(0.75)


@pytest.mark.parametrize("seed", range(5))
def test_auc_equals_the_pairwise_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=23).astype(float).tolist()  # many ties
    labels = (rng.random(23) < 0.5).tolist()
    labels[0], labels[1] = True, False
    assert auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)


def test_roc_points_by_hand() -> None:
    scores = [3, 2, 2, 1, 0]
    labels = [True, True, False, False, True]
    pts = roc_points(scores, labels)
    assert [(p["threshold"], p["tp"], p["fp"]) for p in pts] == [
        (None, 0, 0), (3.0, 1, 0), (2.0, 2, 1), (1.0, 2, 2), (0.0, 3, 2)]
    assert pts[2]["tpr"] == pytest.approx(2 / 3) and pts[2]["fpr"] == pytest.approx(1 / 2)
    # the area of the step curve (trapezoids, ties as diagonals) is the Mann-Whitney AUC
    area = sum((b["fpr"] - a["fpr"]) * (a["tpr"] + b["tpr"]) / 2 for a, b in zip(pts, pts[1:]))
    assert area == pytest.approx(auc(scores, labels))


def test_tpr_at_fpr_by_hand() -> None:
    # 10 non-members scoring 0..9, 5 members scoring 5, 8.5, 9.5, 10, 11
    neg = list(range(10))
    pos = [5, 8.5, 9.5, 10, 11]
    scores, labels = [*pos, *neg], [True] * 5 + [False] * 10
    out = tpr_at_fpr(scores, labels, 0.1)
    # FPR <= 0.1 allows one false positive (score 9): the lowest such threshold, 8.5,
    # catches the members 8.5, 9.5, 10, 11
    assert out["threshold"] == 8.5 and (out["tp"], out["fp"]) == (4, 1)
    assert out["tpr"] == pytest.approx(0.8) and out["fpr"] == pytest.approx(0.1)
    assert out["tpr_ci"] == pytest.approx(list(clopper_pearson(4, 5, 0.95)))
    assert out["fpr_ci"] == pytest.approx(list(clopper_pearson(1, 10, 0.95)))
    assert out["resolved"]
    strict = tpr_at_fpr(scores, labels, 0.01)  # 10 non-members cannot resolve 1 %: FPR 0
    assert strict["threshold"] == 9.5 and (strict["tp"], strict["fp"]) == (3, 0)
    assert not strict["resolved"]


def test_interval_without_signal_covers_half_and_with_signal_excludes_it() -> None:
    rng = np.random.default_rng(0)
    labels = [True] * 30 + [False] * 30
    noise = rng.normal(size=60).tolist()
    ci = auc_interval(noise, labels, seed=1)
    assert covers(ci, 0.5) and ci["low"] < auc(noise, labels) < ci["high"]
    assert "bootstrap" in ci["method"] and "not exact" in ci["method"]
    signal = [x + (3.0 if y else 0.0) for x, y in zip(noise, labels)]
    ci2 = auc_interval(signal, labels, seed=1)
    assert ci2["low"] > 0.9 and not covers(ci2, 0.5)
    assert auc_interval(noise, labels, seed=1) == ci  # seeded
    constant = auc_interval([0.0] * 60, labels)  # no information at all: exactly one half
    assert constant["low"] == constant["high"] == 0.5


def test_summary_reuses_the_canary_bound() -> None:
    scores = [1.0] * 20 + [0.0] * 20
    labels = [True] * 20 + [False] * 20
    out = roc_summary(scores, labels, seed=3)
    assert out["auc"] == 1.0 and out["n_members"] == out["n_non_members"] == 20
    assert out["eps"] == audit_scores(scores, labels, seed=3)
    # one candidate threshold (scores 0 and 1): the all-trials rule measures on 20 + 20 at
    # 95 %, TPR_lo = 0.025^(1/20), FPR_hi = 1 - 0.025^(1/20) (the split-half rule, this
    # figure before, measured on 10 + 10 only: 0.025^(1/10))
    lo = 0.025 ** (1 / 20)
    assert out["eps"]["threshold_rule"] == "all-trials" and out["eps"]["candidates"] == 1
    assert out["eps"]["eps_lower"] == pytest.approx(math.log(lo / (1 - lo)), abs=1e-12)
    assert out["eps"]["eps_max_showable"] == out["eps"]["eps_lower"]  # a perfect attack
    half = 0.025 ** (1 / 10)
    split = audit_scores(scores, labels, seed=3, rule="split-half")
    assert split["eps_lower"] == pytest.approx(math.log(half / (1 - half)), abs=1e-12)
    # the smallest AUC − ½ the one-sided rank test detects at 95 %: z_0.95 · √(41 / (12·400))
    assert out["auc_min_detectable"] == pytest.approx(1.6448536269514722 * math.sqrt(41 / 4800),
                                                      abs=1e-12)
    assert [t["fpr_target"] for t in out["tpr_at_fpr"]] == [0.01, 0.1]


@pytest.mark.parametrize(("scores", "labels", "field"), [
    ([1.0, 2.0], [True, True], "labels"),
    ([1.0, 2.0], [False, False], "labels"),
    ([1.0], [True, False], "scores"),
    ([1.0, float("nan")], [True, False], "scores"),
])
def test_bad_input(scores: list[float], labels: list[bool], field: str) -> None:
    with pytest.raises(InputError) as err:
        auc(scores, labels)
    assert err.value.field == field
    with pytest.raises(InputError):
        tpr_at_fpr([1.0, 0.0], [True, False], 0.0)


def test_exact_test_by_enumerating_every_labelling() -> None:
    """The exact p-value: the share of all ways to pick which 3 of 7 documents are members
    whose rank sum is at least the observed one."""
    scores = [7.0, 6.0, 4.0, 5.0, 3.0, 2.0, 1.0]
    labels = [True, True, True, False, False, False, False]
    observed = sum(s for s, y in zip(scores, labels) if y)  # scores here are their ranks
    picks = list(itertools.combinations(scores, 3))
    p = sum(sum(c) >= observed for c in picks) / len(picks)
    out = auc_test(scores, labels)
    assert out["method"] == "exact Mann-Whitney" and out["p_value"] == pytest.approx(p)
    assert auc_test([1.0, 1.0, 0.0, 1.0], [True, True, False, False])["method"].endswith(
        "tie correction")
    assert auc_test([2.0] * 4, [True, True, False, False])["p_value"] == 1.0
