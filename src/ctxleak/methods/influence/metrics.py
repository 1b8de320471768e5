"""Summary statistics, regurgitation and quality metrics for context influence (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models §4)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

import numpy as np

from ctxleak.methods.stats import bootstrap_ci, finite
from ctxleak.methods.tradeoff.utility import rouge_l_f1


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


def context_token_fraction(response_ids: Sequence[int], context_ids: Sequence[int]) -> float:
    """Fraction of the response's tokens that appear in the context (by exact token id)."""
    if not response_ids:
        return 0.0
    ctx = set(context_ids)
    return sum(1 for t in response_ids if t in ctx) / len(response_ids)


def is_repeat(response_ids: Sequence[int], context_ids: Sequence[int],
              threshold: float = 0.5) -> bool:
    """Repeat Prompts criterion (§4.2): at least half of the response's tokens are
    tokens of the context."""
    return bool(response_ids) and context_token_fraction(response_ids, context_ids) >= threshold


def is_rouge_repeat(response: str, context: str, threshold: float = 0.5) -> bool:
    """Rouge Prompts criterion (§4.2): ROUGE-L F1 against the context above 0.5."""
    return rouge_l_f1(response, context) > threshold


def mean_curve(rows: Iterable[Sequence[float]]) -> list[float | None]:
    """Position-wise mean of ragged rows (e.g. influence of the t-th token over responses).
    The rows are read once, in order, and only their values kept (float64, per position)."""
    columns: list[array[float]] = []
    for r in rows:
        for t, v in enumerate(r):
            if t == len(columns):
                columns.append(array("d"))
            columns[t].append(v)
    return [float(np.mean(np.frombuffer(c, dtype=np.float64))) for c in columns]
