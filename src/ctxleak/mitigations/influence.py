"""What a decoded answer cost in context influence (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.1 and 3.2), each defined once: CID's ledger
(:mod:`ctxleak.mitigations.ledger`), the influence method's n-gram windows and control, and the
in-context PII probe all compute them here."""

from __future__ import annotations

from typing import Any

import numpy as np


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
