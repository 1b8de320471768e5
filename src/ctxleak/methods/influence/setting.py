"""The settings of an influence run: one (λ, T, context size) per :class:`Setting`, and the
run's :class:`InfluenceOptions` ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models", Alg. 1 and Def. 3.3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.mechanisms import AnswerRequest, Asked, Decoding, Mechanism
from ctxleak.mitigations.prompts import PromptParts

#: How the sweep grammar writes "no bound" (plain CID) in an ε list; ``inf`` means the same.
NO_BOUND = "none"


@dataclass(frozen=True)
class Setting:
    """One cell of a sweep: λ, temperature, context size (None = whole context) and, for
    bounded CID, ε per token (λ is then λ_max; None: plain CID). ``added``: the unmitigated
    baseline (λ = 1, no bound) the sweep did not ask for, measured so that every setting has
    its utility difference to it; not part of the key. ``mechanism``: the defence that decodes
    the response (:mod:`ctxleak.mitigations.mechanisms`): CID at ``lam`` and ``bounded_eps``
    (:meth:`cid` builds such a setting), or another, which is then scored as CID at λ = 1
    would score it (``lam`` is 1)."""

    lam: float
    temperature: float
    context_tokens: int | None = None
    bounded_eps: float | None = None
    added: bool = field(default=False, compare=False)
    mechanism: Mechanism = field(kw_only=True)

    @classmethod
    def cid(cls, lam: float, temperature: float, context_tokens: int | None = None,
            bounded_eps: float | None = None, added: bool = False) -> Setting:
        """The setting whose response CID decodes at ``lam`` and ``bounded_eps``."""
        return cls(lam, temperature, context_tokens, bounded_eps, added,
                   mechanism=CID(lam, bounded_eps))

    @property
    def decoded_by_cid(self) -> bool:
        """Whether the response is decoded by the CID that ``lam`` and ``bounded_eps`` name
        (its influence is that decoding's own), not by another mechanism scored as CID at
        λ = 1."""
        return self.mechanism == CID(self.lam, self.bounded_eps)

    @property
    def is_baseline(self) -> bool:
        """λ = 1 without a bound: plain decoding, the setting a sweep's utility is read
        against."""
        return self.mechanism == CID()

    @property
    def key(self) -> str:
        k = "all" if self.context_tokens is None else str(self.context_tokens)
        eps = "" if self.bounded_eps is None else f",eps={self.bounded_eps:g}"
        mech = "" if self.decoded_by_cid else f",mechanism={self.mechanism.key()}"
        return f"lambda={self.lam:g},T={self.temperature:g},context={k}{eps}{mech}"


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
    # CID's answers drawn greedily (the most likely token of p̄_λ at each step), scored at T:
    # the decoding a team deploys at temperature 0
    greedy: bool = False

    def cid(self, setting: Setting) -> tuple[CID, Decoding]:
        """CID at ``setting`` (its bounded ε, where it has one, else these options') and its
        decoding (greedy where these options say so)."""
        eps = setting.bounded_eps if setting.bounded_eps is not None else self.bounded_eps
        return CIDConfig(lam=setting.lam, temperature=setting.temperature,
                         max_new_tokens=self.max_new_tokens, min_new_tokens=self.min_new_tokens,
                         bounded_eps=eps, greedy=self.greedy)

    def asked(self, setting: Setting, parts: PromptParts, documents: Sequence[str],
              seed: int) -> Asked:
        """One response asked of CID at ``setting`` (:meth:`cid`; greedy where these options
        say so) from the prompt ``parts`` holding ``documents``, drawn from ``seed``."""
        cid, decoding = self.cid(setting)
        request = AnswerRequest(tuple(documents), parts.prompt_of(documents), seed)
        return Asked(cid, request, decoding)


def round_floats(values: Sequence[float] | np.ndarray, digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def settings_grid(lams: Sequence[float], temps: Sequence[float],
                  context_sizes: Sequence[int | None],
                  bounded_eps: Sequence[float | None] = (None,),
                  baseline: bool = False,
                  mechanisms: Sequence[Mechanism] = ()) -> list[Setting]:
    """Every combination, λ varying fastest, then T, then bounded ε, then the context size;
    then each of ``mechanisms`` at every T (scored at λ = 1). ``baseline``: each context size's
    settings start with λ = 1 without a bound at every T the combinations lack (``added``).

    λ = 0 is the no-context answer under any bound (bounded CID's λ_t ∈ [0, λ_max] = {0}), so
    it is kept once per T and context size: without a bound where the list has none, else at
    the first ε."""
    out: list[Setting] = []
    for k in context_sizes:
        first_eps = None if None in bounded_eps else bounded_eps[0]
        asked = [Setting.cid(lam, t, k, eps) for eps in bounded_eps for t in temps
                 for lam in lams if lam != 0 or eps == first_eps]
        asked += [Setting(1.0, t, k, None, mechanism=m) for m in mechanisms for t in temps]
        if baseline:
            out += [Setting.cid(1.0, t, k, None, added=True) for t in temps
                    if Setting.cid(1.0, t, k, None) not in asked]
        out += asked
    return out


def _eps_value(item: Any, param: str) -> tuple[float | None, str]:
    """One entry of an ε list: ``(ε, as written)``, None for no bound (``none`` or ``inf``:
    bounded CID's search keeps λ_t = λ_max wherever the bound holds, and an infinite bound
    always holds, so ε = inf is plain CID at λ)."""
    text = NO_BOUND if item is None else str(item).strip()
    if text.lower() == NO_BOUND:
        return None, NO_BOUND
    try:
        if isinstance(item, bool):
            raise ValueError
        eps = float(item) if isinstance(item, (int, float)) else float(text)
    except (TypeError, ValueError):
        eps = math.nan
    if math.isnan(eps) or eps < 0:
        raise ConfigError(f"{param}: '{text}' is not an ε per token: give numbers >= 0 (0: "
                          f"λ_t = 0, the no-context answer), '{NO_BOUND}' (plain CID, no bound) "
                          f"or 'inf' (no bound, the same as {NO_BOUND}), e.g. none,2,8",
                          param=param)
    return (None, text) if math.isinf(eps) else (eps, text)


def eps_list(value: Any, param: str = "bounded_eps") -> list[float | None]:
    """The sweep grammar of bounded CID's ε per token ("Estimating Privacy Leakage of Augmented
    Contextual Knowledge in Language Models", App. B): a number, a list, or a comma list such as
    ``"none,0,2,8"``; ``none`` (or None) is plain CID, ``inf`` the same (no bound), 0 forces
    λ_t = 0. [] where ``value`` is None. A setting listed twice is refused, naming both
    spellings."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else (
        [value] if isinstance(value, (int, float)) else
        [part for part in str(value).split(",") if part.strip()])
    seen: dict[float | None, str] = {}
    for item in items:
        eps, text = _eps_value(item, param)
        if eps in seen:
            what = "no bound (plain CID)" if eps is None else f"ε = {eps:g}"
            raise ConfigError(f"{param} lists {what} twice ('{seen[eps]}' and '{text}'): each "
                              f"setting once", param=param)
        seen[eps] = text
    return list(seen)

