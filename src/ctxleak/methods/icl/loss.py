"""ICLInf maths (Evaluating Privacy Leakage From In-Context Learning §3, Eq. 3-4; App. B; App. E.1),
in float64 log space.

For a query x_j with exemplar set S_j of n exemplars:

    loss_{j,i} = max_y | log A(S_j, x_j)(y) - log A(S_j \\ e_i, x_j)(y) |      (inner part of Eq. 4)
    ICLInf_j   = max_i loss_{j,i}
    ICLInf     = mean_j ICLInf_j   (reported with its standard deviation, paper Table 1)

A is the next-token distribution restricted to the labels and renormalised (§3), or the full
next-token distribution (App. E.1); contextual calibration (App. B) is in
:mod:`ctxleak.methods.icl.calibration`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy.special import logsumexp


def renormalise(logp: np.ndarray) -> np.ndarray:
    """Restrict to the given outcomes and renormalise: ``logp - logsumexp(logp)`` on the last
    axis (the label distribution of §3 from the labels' log-probabilities)."""
    logp = np.asarray(logp, dtype=np.float64)
    return cast("np.ndarray", logp - logsumexp(logp, axis=-1, keepdims=True))


def position_losses(logp_full: np.ndarray, logp_loo: np.ndarray) -> np.ndarray:
    """``loss_i = max_y |log A(S)(y) - log A(S \\ e_i)(y)|`` for each removed exemplar i:
    ``logp_full`` [k], ``logp_loo`` [n, k] -> [n]. Symmetric in its two arguments."""
    full = np.asarray(logp_full, dtype=np.float64)
    loo = np.atleast_2d(np.asarray(logp_loo, dtype=np.float64))
    both_zero = np.isneginf(full)[None, :] & np.isneginf(loo)  # impossible in both: no loss
    with np.errstate(invalid="ignore"):
        diff = np.abs(full[None, :] - loo)
    diff[both_zero] = 0.0
    return cast("np.ndarray", diff.max(axis=-1))


def query_iclinf(losses: np.ndarray) -> float:
    """``ICLInf_j = max_i loss_{j,i}`` (Eq. 4, the max over exemplars of one query)."""
    return float(np.max(losses))


@dataclass(frozen=True)
class ICLInfSummary:
    """Eq. 4 over m queries: mean ± std of ICLInf_j, accuracy, mean loss by exemplar position."""

    n: int
    mean: float
    std: float
    accuracy: float | None
    loss_by_position: list[float]

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "iclinf_mean": self.mean, "iclinf_std": self.std,
                "accuracy": self.accuracy, "mean_loss_by_position": self.loss_by_position}


def summarize_iclinf(iclinf: Sequence[float], losses: Sequence[Sequence[float]],
              correct: Sequence[bool] | None = None) -> ICLInfSummary:
    """Mean and standard deviation (ddof = 1; 0 for one query) of the per-query ICLInf, the
    accuracy and the mean loss at each exemplar position (paper Fig. 1)."""
    values = np.asarray(iclinf, dtype=np.float64)
    n = len(values)
    by_pos = np.asarray(losses, dtype=np.float64).mean(axis=0).tolist() if n else []
    return ICLInfSummary(
        n=n, mean=float(values.mean()) if n else float("nan"),
        std=float(values.std(ddof=1)) if n > 1 else 0.0,
        accuracy=float(np.mean(correct)) if correct is not None and len(correct) else None,
        loss_by_position=[float(v) for v in by_pos])
