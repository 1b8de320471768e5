"""The settings of an influence run: one (λ, T, context size) per :class:`Setting`, and the
run's :class:`InfluenceOptions` ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models", Alg. 1 and Def. 3.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxleak.mitigations.cid import (
    CIDConfig,
)


@dataclass(frozen=True)
class Setting:
    """One cell of a sweep: λ, temperature, context size (None = whole context) and, for
    bounded CID, ε per token (λ is then λ_max; None: plain CID)."""

    lam: float
    temperature: float
    context_tokens: int | None = None
    bounded_eps: float | None = None

    @property
    def key(self) -> str:
        k = "all" if self.context_tokens is None else str(self.context_tokens)
        eps = "" if self.bounded_eps is None else f",eps={self.bounded_eps:g}"
        return f"lambda={self.lam:g},T={self.temperature:g},context={k}{eps}"


@dataclass(frozen=True)
class InfluenceOptions:
    """Everything but λ and T, which vary by :class:`Setting`."""

    max_new_tokens: int = 50
    min_new_tokens: int = 10
    bounded_eps: float | None = None
    ngram: int | None = None  # None: only the whole context (n = |D|)
    stride: int | None = None
    template: str | None = None
    repeat_threshold: float = 0.5
    rouge_threshold: float = 0.5
    reuse_prefix: bool = True
    control: bool = True  # also score each response with another example's context

    def cid(self, setting: Setting) -> CIDConfig:
        """CID at ``setting`` (its bounded ε, where it has one, else these options')."""
        eps = setting.bounded_eps if setting.bounded_eps is not None else self.bounded_eps
        return CIDConfig(lam=setting.lam, temperature=setting.temperature,
                         max_new_tokens=self.max_new_tokens, min_new_tokens=self.min_new_tokens,
                         bounded_eps=eps)


def round_floats(values: Sequence[float] | np.ndarray, digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def settings_grid(lams: Sequence[float], temps: Sequence[float],
                  context_sizes: Sequence[int | None],
                  bounded_eps: Sequence[float | None] = (None,)) -> list[Setting]:
    """Every combination, λ varying fastest, then T, then bounded ε, then the context size."""
    return [Setting(lam, t, k, eps) for k in context_sizes for eps in bounded_eps
            for t in temps for lam in lams]

