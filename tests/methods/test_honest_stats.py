"""Honest statistics: intervals, densities and tests only where n can carry them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ctxleak.methods.stats import (
    BOOTSTRAP_BATCH_VALUES,
    MIN_BOOTSTRAP_N,
    MIN_KDE_DISTINCT,
    bootstrap_ci,
    kde_reason,
    signed_rank_min_n,
    signed_rank_min_p,
    signed_rank_power_note,
)


@pytest.mark.parametrize("n", range(1, 13))
def test_min_p_is_what_scipy_gives_when_every_difference_is_positive(n):
    # the exact one-sided test: all n differences positive is the most extreme of 2^n patterns
    p = stats.wilcoxon(np.arange(1, n + 1, dtype=float), alternative="greater").pvalue
    assert p == pytest.approx(signed_rank_min_p(n), rel=1e-12)
    # and no other data of n non-zero differences gets below it
    rng = np.random.default_rng(n)
    for _ in range(20):
        d = rng.normal(size=n) + 0.5
        d[d == 0] = 1.0
        assert stats.wilcoxon(d, alternative="greater").pvalue >= signed_rank_min_p(n) - 1e-12


@pytest.mark.parametrize("alpha, need", [(0.05, 5), (0.01, 7), (0.1, 4), (0.001, 10),
                                         (0.5, 1), (0.0625, 4), (0.03125, 5)])
def test_min_n_is_the_least_n_whose_min_p_reaches_alpha(alpha, need):
    assert signed_rank_min_n(alpha) == need == math.ceil(math.log2(1 / alpha))
    assert signed_rank_min_p(need) <= alpha < signed_rank_min_p(need - 1)


def test_power_note_says_why_n_cannot_reject():
    note = signed_rank_power_note(3, 0.05)
    assert not note["can_reject"] and note["min_n"] == 5 and note["min_pvalue"] == 0.125
    assert "0.125" in note["reason"] and "n ≥ 5" in note["reason"]
    ok = signed_rank_power_note(5, 0.05)
    assert ok["can_reject"] and ok["reason"] is None
    with pytest.raises(ValueError):
        signed_rank_min_n(1.5)


def test_bootstrap_is_scipy_bca_and_refuses_small_n():
    few = [1.0, 2.0, 3.0]
    assert bootstrap_ci(few) == (None, None, bootstrap_ci(few)[2])
    assert str(MIN_BOOTSTRAP_N) in bootstrap_ci(few)[2]
    x = [0.3, 1.1, 2.0, 2.2, 3.5, 4.1, 5.0, 5.5, 8.0, 13.0]
    low, high, reason = bootstrap_ci(x, seed=4)
    ref = stats.bootstrap((np.asarray(x),), np.mean, method="BCa", n_resamples=2000,
                          random_state=np.random.default_rng(4)).confidence_interval
    assert reason is None and (low, high) == pytest.approx((ref.low, ref.high))
    assert low < np.mean(x) < high
    # a constant sample: the degenerate interval, not NaN
    assert bootstrap_ci([2.5] * 12) == (2.5, 2.5, None)
    # non-finite values and None are left out before counting
    assert bootstrap_ci([1.0] * 9 + [None, math.nan])[0] is None


def test_kde_needs_five_distinct_values():
    assert kde_reason([1, 2, 3, 4, 5]) is None
    assert f"< {MIN_KDE_DISTINCT}" in kde_reason([1, 1, 2, 3, 4, 4])


def test_the_bootstrap_in_batches_gives_the_interval_drawn_at_once():
    """bootstrap_ci draws its resamples and jackknife in batches (memory bounded whatever n):
    the interval is scipy's BCa interval drawn all at once, to the last bit."""
    x = np.random.default_rng(3).exponential(size=600)
    assert BOOTSTRAP_BATCH_VALUES // x.size < 2000  # so it is drawn in several batches
    whole = stats.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=2000,
                            method="BCa", random_state=np.random.default_rng(0))
    low, high, reason = bootstrap_ci(x.tolist(), seed=0)
    assert reason is None
    assert (low, high) == (whole.confidence_interval.low, whole.confidence_interval.high)
