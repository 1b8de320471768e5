"""Honest statistics: an interval, a density or a test only where the sample can carry it.

Every function here returns the number, or ``None`` with the reason in words, so that a report
shows "—" and why rather than a figure the sample cannot support. The thresholds are stated
once, here:

* a bootstrap confidence interval of a mean needs ``MIN_BOOTSTRAP_N`` = 10 finite values (with
  fewer, the bootstrap distribution has too few distinct resamples to give its tails); it is the
  bias-corrected and accelerated (BCa) interval of :func:`scipy.stats.bootstrap` ("An
  Introduction to the Bootstrap", Efron and Tibshirani, ch. 14); a constant sample has the
  degenerate interval [c, c];
* a kernel density estimate needs ``MIN_KDE_DISTINCT`` = 5 distinct values (fewer are shown as
  points, a rug, not as a smooth curve);
* the one-sided exact Wilcoxon signed-rank test of n non-zero paired differences can never give
  a p-value below ``2**-n`` (all n differences of one sign: one of the 2^n equally likely sign
  patterns), so it can reject at level α only when ``n >= ceil(log2(1/α))``
  (:func:`signed_rank_min_n`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Finite values a bootstrap confidence interval needs.
MIN_BOOTSTRAP_N = 10
#: Distinct values a kernel density estimate needs.
MIN_KDE_DISTINCT = 5
#: Values (resamples × sample size) a bootstrap holds at once: its resamples and its jackknife
#: are drawn in batches of that many (2 MiB of float64), so its memory does not grow with
#: the sample; the interval is the same as drawn all at once (the same random stream, in order).
BOOTSTRAP_BATCH_VALUES = 1 << 18


def finite(values: Sequence[float | None]) -> np.ndarray:
    """The finite values of ``values`` (``None`` and NaN/inf left out), float64."""
    return np.asarray([v for v in values if v is not None and math.isfinite(float(v))],
                      dtype=np.float64)


def bootstrap_ci(values: Sequence[float | None], *, level: float = 0.95, n_resamples: int = 2000,
                 seed: int = 0) -> tuple[float | None, float | None, str | None]:
    """``(low, high, reason)``: the BCa bootstrap interval of the mean at ``level``, or
    ``(None, None, reason)`` when there are fewer than :data:`MIN_BOOTSTRAP_N` finite values.
    A constant sample gives ``(c, c, None)`` (every resample has the same mean)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = finite(values)
    if x.size < MIN_BOOTSTRAP_N:
        return None, None, (f"n = {x.size} < {MIN_BOOTSTRAP_N}: too few values for a "
                            "bootstrap interval")
    if np.ptp(x) == 0:
        return float(x[0]), float(x[0]), None
    from scipy import stats  # here: the verdicts and reports import this module without scipy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's DegenerateDataWarning is handled below
        res = stats.bootstrap((x,), np.mean, confidence_level=level, n_resamples=n_resamples,
                              method="BCa", random_state=np.random.default_rng(seed),
                              batch=max(1, BOOTSTRAP_BATCH_VALUES // x.size))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, None, "the BCa interval is undefined for this sample (degenerate resamples)"
    return low, high, None


def mean_with_ci(values: Sequence[float], *, n_boot: int = 2000, level: float = 0.95,
              seed: int = 0) -> dict[str, float | int | str | None]:
    """Mean, median, std and the BCa bootstrap confidence interval of the mean
    (:func:`ctxleak.methods.stats.bootstrap_ci`, :func:`scipy.stats.bootstrap`). With fewer than
    :data:`~ctxleak.methods.stats.MIN_BOOTSTRAP_N` values the interval is ``None`` and
    ``ci_reason`` says why; ``ci_method`` names the interval."""
    x = finite(values)
    if x.size == 0:
        return {"n": 0, "mean": None, "median": None, "std": None, "ci_low": None,
                "ci_high": None, "ci_method": None, "ci_reason": "no values"}
    low, high, reason = bootstrap_ci(x.tolist(), level=level, n_resamples=n_boot, seed=seed)
    return {"n": int(x.size), "mean": float(x.mean()), "median": float(np.median(x)),
            "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "ci_low": low, "ci_high": high,
            "ci_method": "BCa bootstrap" if reason is None else None, "ci_reason": reason}


def kde_reason(values: Sequence[float | None]) -> str | None:
    """Why a kernel density estimate of ``values`` is not drawn (fewer than
    :data:`MIN_KDE_DISTINCT` distinct finite values), or ``None`` when it can be."""
    distinct = len(set(finite(values).tolist()))
    if distinct < MIN_KDE_DISTINCT:
        return f"{distinct} distinct values < {MIN_KDE_DISTINCT}: no density estimate"
    return None


def signed_rank_min_p(n: int) -> float:
    """The smallest p-value the one-sided exact Wilcoxon signed-rank test of ``n`` non-zero
    differences can give: ``2**-n`` (1 for n = 0)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return 2.0 ** -n


def signed_rank_min_n(alpha: float) -> int:
    """The smallest number of non-zero paired differences at which the one-sided exact Wilcoxon
    signed-rank test can reject at level ``alpha``: the least n with ``2**-n <= alpha``,
    ``ceil(log2(1/alpha))`` (5 at α = 0.05, 7 at α = 0.01)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n = max(math.ceil(math.log2(1.0 / alpha)), 1)
    while signed_rank_min_p(n) > alpha:  # guard the float log against an off-by-one
        n += 1
    while n > 1 and signed_rank_min_p(n - 1) <= alpha:
        n -= 1
    return n


def signed_rank_power_note(n: int, alpha: float) -> dict[str, Any]:
    """What a one-sided signed-rank test of ``n`` non-zero differences can say at ``alpha``:
    ``min_pvalue`` (2^-n), ``can_reject`` and ``min_n`` (the smallest n that could), and a
    ``reason`` sentence when it cannot reject whatever the data."""
    need = signed_rank_min_n(alpha)
    out: dict[str, Any] = {"alpha": alpha, "min_pvalue": signed_rank_min_p(n),
                           "can_reject": n >= need, "min_n": need, "reason": None}
    if n < need:
        out["reason"] = (f"n = {n} is too small: the one-sided signed-rank test can never go "
                         f"below p = 2^-{n} = {signed_rank_min_p(n):.3g} > α = {alpha:g}; "
                         f"it needs n ≥ {need}")
    return out


__all__ = ["BOOTSTRAP_BATCH_VALUES", "MIN_BOOTSTRAP_N", "MIN_KDE_DISTINCT", "bootstrap_ci",
           "finite", "kde_reason", "signed_rank_min_n", "signed_rank_min_p", "signed_rank_power_note"]
