"""The three quantities of context influence (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.1-3.3), each defined once: CID responses (:mod:`.cid`), n-gram
windows (:mod:`.ngrams`) and the in-context PII probe (:mod:`ctxleak.methods.pii.probe`) all compute
them here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxleak.methods.influence.metrics import mean_with_ci


def token_influence(logp_with: Any, logp_without: Any) -> np.ndarray:
    """Token influence (Def. 3.1, Eq. 3): ``τ_t = |log p̄_λ(y_t | D) −
    log p̄_λ(y_t | D∖D_{i,n})|`` for each response token y_t, in float64.

    ``logp_with``: log-probabilities of the tokens given the whole context; ``logp_without``:
    given the context without the n-gram (the empty context for n = |D|). Arrays broadcast, so
    ``[T]`` against ``[windows, T]`` gives one row per window."""
    return np.abs(np.asarray(logp_with, dtype=np.float64)
                  - np.asarray(logp_without, dtype=np.float64))


def response_influence(tau: Any) -> Any:
    """Response influence (Def. 3.2, Eq. 4): the sum of the token influences over the
    response, ``Σ_t τ_t``; over the last axis for one row per window (a float for one row)."""
    tau = np.asarray(tau, dtype=np.float64)
    total = tau.sum(axis=-1)
    return float(total) if total.ndim == 0 else total


def expected_influence(response_influences: Sequence[float], *, seed: int = 0,
                       n_boot: int = 2000, level: float = 0.95) -> dict[str, Any]:
    """Expected influence (Def. 3.3, Eq. 5): the mean response influence over the
    dataset (one response drawn per example), with median, std and a bootstrap interval."""
    return mean_with_ci(response_influences, n_boot=n_boot, level=level, seed=seed)
