"""Summary statistics, regurgitation and quality metrics for context influence (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models §4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rouge_score import rouge_scorer


def mean_with_ci(values: Sequence[float], *, n_boot: int = 2000, level: float = 0.95,
              seed: int = 0) -> dict[str, float | int | None]:
    """Mean, median, std and a percentile bootstrap confidence interval of the mean."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return {"n": 0, "mean": None, "median": None, "std": None, "ci_low": None,
                "ci_high": None}
    out: dict[str, float | int | None] = {
        "n": int(x.size), "mean": float(x.mean()), "median": float(np.median(x)),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0}
    if x.size > 1:
        rng = np.random.default_rng(seed)
        means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
        alpha = (1.0 - level) / 2.0
        out["ci_low"], out["ci_high"] = (float(np.quantile(means, alpha)),
                                         float(np.quantile(means, 1.0 - alpha)))
    else:
        out["ci_low"] = out["ci_high"] = float(x[0])
    return out


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


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 with the ``rouge-score`` package (offline; Porter stemming)."""

    scorer = _scorer()
    if not prediction.strip() or not reference.strip():
        return 0.0
    return float(scorer.score(reference, prediction)["rougeL"].fmeasure)


_SCORER = None


def _scorer():
    global _SCORER
    if _SCORER is None:
        _SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return _SCORER


def is_rouge_repeat(response: str, context: str, threshold: float = 0.5) -> bool:
    """Rouge Prompts criterion (§4.2): ROUGE-L F1 against the context above 0.5."""
    return rouge_l_f1(response, context) > threshold


def mean_curve(rows: Sequence[Sequence[float]]) -> list[float | None]:
    """Position-wise mean of ragged rows (e.g. influence of the t-th token over responses)."""
    width = max((len(r) for r in rows), default=0)
    out: list[float | None] = []
    for t in range(width):
        vals = [r[t] for r in rows if len(r) > t]
        out.append(float(np.mean(vals)) if vals else None)
    return out
