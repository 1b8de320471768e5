"""Summary statistics, regurgitation and quality metrics for context influence (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models §4)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

import numpy as np

from ctxleak.methods.stats import mean_with_ci  # noqa: F401 - re-exported: its first home
from ctxleak.methods.tradeoff.utility import rouge_l_f1


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
