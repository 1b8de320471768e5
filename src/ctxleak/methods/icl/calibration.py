"""Contextual calibration (Evaluating Privacy Leakage From In-Context Learning App. B, after Zhao et
al. 2021), in float64 log space.

p_cf is the mean distribution of the content-free inputs "N/A", "" and "[MASK]" placed in the same
prompt (same exemplars, the query text replaced); the calibrated distribution is
normalise(W p) with W = diag(1 / (p_cf + eps)). ICLInf calibrates every prompt with the
content-free distribution of its own exemplar set, the leave-one-out prompts included.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from scipy.special import logsumexp

from ctxleak.methods.icl.loss import renormalise

DEFAULT_CALIBRATION_EPS = 1e-6


def content_free_logp(logp_cf: np.ndarray) -> np.ndarray:
    """``log p_cf``: the mean of the content-free distributions (rows, on axis -2), each already
    normalised; App. B averages the inputs "N/A", "" and "[MASK]"."""
    logp_cf = np.asarray(logp_cf, dtype=np.float64)
    return cast("np.ndarray", logsumexp(logp_cf, axis=-2) - np.log(logp_cf.shape[-2]))


def contextual_calibrate(logp: np.ndarray, logp_cf: np.ndarray,
              eps: float = DEFAULT_CALIBRATION_EPS) -> np.ndarray:
    """Contextual calibration (App. B): ``normalise(W p)`` with ``W = diag(1 / (p_cf + eps))``,
    in log space: ``log p - log(p_cf + eps)``, renormalised. A uniform ``p_cf`` is the identity."""
    if eps < 0:
        raise ValueError("the calibration eps must be >= 0")
    logp_cf = np.asarray(logp_cf, dtype=np.float64)
    log_w = -(np.logaddexp(logp_cf, np.log(eps)) if eps > 0 else logp_cf)
    return renormalise(np.asarray(logp, dtype=np.float64) + log_w)


def calibrate_sets(logp: np.ndarray, logp_cf: np.ndarray,
                   eps: float = DEFAULT_CALIBRATION_EPS) -> np.ndarray:
    """Calibrate each exemplar set with its own content-free distribution: ``logp`` [s, k] (one
    row per exemplar set: full, then each leave-one-out), ``logp_cf`` [s, c, k] (the c normalised
    content-free distributions of each set) -> calibrated [s, k]."""
    return contextual_calibrate(logp, content_free_logp(logp_cf), eps)  # both in float64
