"""Expected context influence over a dataset (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.3). Token and response influence (Def. 3.1 and 3.2) are
defined once in :mod:`ctxleak.mitigations.influence`: what a decoded answer cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.influence.metrics import mean_with_ci


def expected_influence(response_influences: Sequence[float], *, seed: int = 0,
                       n_boot: int = 2000, level: float = 0.95) -> dict[str, Any]:
    """Expected influence (Def. 3.3, Eq. 5): the mean response influence over the
    dataset (one response drawn per example), with median, std and a bootstrap interval."""
    return mean_with_ci(response_influences, n_boot=n_boot, level=level, seed=seed)
