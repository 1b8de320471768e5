"""Differentially private retrieval by a similarity threshold ("RAG with Differential Privacy",
Grislain): an exponential mechanism picks a threshold τ from a public grid, and every document
whose similarity is at least τ is retrieved, so each document is one privacy unit.

The utility of a threshold is ``u(τ) = −|n(τ) − k|``, with ``n(τ)`` the number of documents
scoring at least τ and ``k`` the number wanted. Adding or removing one document changes every
``n(τ)`` by at most 1, so ``u`` has sensitivity 1 and sampling τ with probability
``∝ exp(ε·u(τ)/2)`` is ε-DP (and ε-bounded-range: the privacy-loss ratios of all thresholds
lie within a factor e^ε of each other, what the accountant's exponential-mechanism bound
needs). This holds where a document's similarity depends only on that document and the query
(embedding similarity); a score that depends on the other documents (BM25's inverse document
frequency) breaks the sensitivity bound, and the claim with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ctxleak.errors import ConfigError

#: The most public thresholds a grid holds: a request naming a larger grid (``ctxleak serve``
#: takes a mechanism per request) would fill memory with the documents × thresholds counts.
MAX_GRID = 4096


def threshold_grid(low: float, high: float, points: int) -> torch.Tensor:
    """The public candidate thresholds: ``points`` evenly spaced from ``low`` to ``high``."""
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"score_range: ({low}, {high}) is not a finite interval low < high",
                          param="score_range")
    if isinstance(points, bool) or not isinstance(points, int) or not 2 <= points <= MAX_GRID:
        raise ConfigError(f"grid: 2 to {MAX_GRID} thresholds, not {points}", param="grid")
    return torch.linspace(low, high, points, dtype=torch.float64)


def _counts(scores: Sequence[float], grid: torch.Tensor) -> torch.Tensor:
    """``n(τ)`` for every threshold of ``grid``: the documents scoring at least it."""
    s = torch.as_tensor(list(scores), dtype=torch.float64)
    return (s.unsqueeze(0) >= grid.unsqueeze(1)).sum(dim=1).to(torch.float64)


def threshold_logprobs(scores: Sequence[float], grid: torch.Tensor, top_k: int, eps: float
                       ) -> torch.Tensor:
    """The exponential mechanism's log-probabilities over ``grid``: ``ε·u(τ)/2`` normalised,
    ``u(τ) = −|#{scores ≥ τ} − top_k|``."""
    utility = -(_counts(scores, grid) - top_k).abs()
    return torch.log_softmax(eps * utility / 2.0, dim=0)


def passing(scores: Sequence[float], tau: float, cap: int | None = None) -> tuple[int, ...]:
    """The indices of the documents scoring at least ``tau``, in their order; with ``cap``, at
    most ``cap`` of them: the highest scores, a tie going to the document listed first."""
    kept = [i for i, s in enumerate(scores) if float(s) >= tau]
    if cap is not None and len(kept) > cap:
        kept = sorted(sorted(kept, key=lambda i: (-float(scores[i]), i))[:cap])
    return tuple(kept)


def private_retrieval(scores: Sequence[float], grid: torch.Tensor, top_k: int, eps: float,
                      generator: torch.Generator, cap: int | None = None
                      ) -> tuple[float, tuple[int, ...]]:
    """The drawn threshold τ and the indices of the documents scoring at least τ, in their
    order (at most ``cap`` of them: :func:`passing`)."""
    logp = threshold_logprobs(scores, grid, top_k, eps)
    j = int(torch.multinomial(torch.exp(logp), 1, generator=generator))
    tau = float(grid[j])
    return tau, passing(scores, tau, cap)


def retrieval_odds(scores: Sequence[float], grid: torch.Tensor, top_k: int, eps: float
                   ) -> tuple[float, float]:
    """What :func:`private_retrieval` keeps, exactly rather than by sampling: the probability
    that it keeps at least one document (the thresholds at or below the best score) and the
    expected number it keeps (Σ_τ P(τ)·#{scores ≥ τ}). For choosing ``eps_retrieval`` and
    ``top_k`` before decoding anything."""
    p, counts = torch.exp(threshold_logprobs(scores, grid, top_k, eps)), _counts(scores, grid)
    return float(p[counts > 0].sum()), float((p * counts).sum())


__all__ = ["MAX_GRID", "passing", "private_retrieval", "retrieval_odds", "threshold_grid",
           "threshold_logprobs"]
