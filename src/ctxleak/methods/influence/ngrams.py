"""Influence of context n-grams on a response (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.1-3.2).

``τ_{i,n,t} = |log p̄_λ(y_t | D) − log p̄_λ(y_t | D∖D_{i,n})|`` where the ablated distribution is
``softmax((λ·z(·|D∖D_{i,n}) + (1−λ)·z(·|∅)) / T)``. Every ablated prompt shares the prompt up to
its deleted window with the full prompt, so the engine reuses that KV prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from ctxleak.engine.generation import mask_eos_before_min
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.scoring import continuation_logits
from ctxleak.errors import ConfigError
from ctxleak.kernels.cid import bounded_lambdas, cid_logprobs
from ctxleak.mitigations.influence import response_influence, token_influence


@dataclass(frozen=True)
class PromptParts:
    """A prompt as ids before the context, the context ids, and ids after it."""

    before: tuple[int, ...]
    context: tuple[int, ...]
    after: tuple[int, ...]

    def with_context(self, context: Sequence[int]) -> list[int]:
        return list(self.before) + list(context) + list(self.after)

    @property
    def full(self) -> list[int]:
        return self.with_context(self.context)

    @property
    def empty(self) -> list[int]:
        return self.with_context(())


def windows(length: int, n: int, stride: int | None = None) -> list[tuple[int, int]]:
    """``[start, end)`` of each n-gram window over a context of ``length`` tokens. The default
    stride is n (non-overlapping, Def. 3.1); the last window may be shorter so every token is
    covered."""
    if n < 1:
        raise ConfigError(f"ngram must be >= 1, not {n}", param="ngram")
    if n > length:
        raise ConfigError(f"ngram={n} is larger than the context ({length} tokens)",
                          param="ngram")
    stride = n if stride is None else stride
    if stride < 1:
        raise ConfigError(f"stride must be >= 1, not {stride}", param="stride")
    out = []
    start = 0
    while start < length:
        out.append((start, min(start + n, length)))
        if start + n >= length:
            break
        start += stride
    return out


@dataclass
class WindowInfluence:
    """``logp_context[t]`` = log p̄_λ(y_t | D) and ``logp_ablated[i, t]`` = log p̄_λ(y_t | D∖spans[i])
    from one scoring pass; ``tau[i, t]`` is their absolute difference (Def. 3.1)."""

    spans: list[tuple[int, int]]
    logp_context: np.ndarray
    logp_ablated: np.ndarray
    logp_empty: np.ndarray | None = None  # log softmax(z(·|∅)/T)(y_t), when asked for

    @property
    def tau(self) -> np.ndarray:
        return token_influence(self.logp_context[None, :], self.logp_ablated)

    @property
    def per_window(self) -> np.ndarray:
        """Response influence of each window (Def. 3.2: the sum over t)."""
        return cast("np.ndarray", response_influence(self.tau))


@dataclass(frozen=True)
class WindowRequest:
    """One example's n-gram scoring: its prompt parts, response, windows and CID settings."""

    parts: PromptParts
    response: Sequence[int]
    spans: Sequence[tuple[int, int]]
    lam: float | Sequence[float] = 1.0  # or one λ_t per response token (bounded CID)
    temperature: float = 1.0
    min_new_tokens: int = 0
    # the full prompt's KV cache, already computed (engine.local.prefill.prefill_alone): not recomputed
    prefix_cache: Any = field(default=None, repr=False, compare=False)
    # bounded CID (App. B, Alg. 1): ``lam`` is λ_max, and the full prompt and every
    # ablated one each get their own λ_t by Alg. 1's bisection on their own logits
    bounded_eps: float | None = None
    # also ``logp_empty``, the response's log-probs without the context at temperature T (the
    # no-context pass then runs at λ = 1 too), so that with ``logp_context`` the scoring gives
    # every float of the CID response (Def. 3.1 with n = |D|)
    with_empty: bool = False


def window_influence(lm: LanguageModel, parts: PromptParts, response: Sequence[int], spans: Sequence[
        tuple[int, int]], *, lam: float | Sequence[float], temperature: float,
        min_new_tokens: int = 0, reuse_prefix: bool = True, bounded_eps: float | None = None
        ) -> WindowInfluence:
    """Teacher-forced influence of each context window on ``response`` under CID.

    The EOS mask of the first ``min_new_tokens`` steps is applied as during generation, so the
    scored distributions are the ones the response was drawn from. ``lam`` is one λ for every
    token, or one λ_t per response token (each context mixed with that λ_t).

    ``bounded_eps``: bounded CID (App. B, Alg. 1; ``lam`` is then λ_max). Its privacy
    loss (Thm B.1) compares the mechanism on D with the mechanism on D∖D_{i,n}, which picks its
    own λ'_t: so p̄(y_t | D) is mixed with the λ_t that Alg. 1 picks on z(·|D) and z(·|∅), and
    each p̄(y_t | D∖D_{i,n}) with the λ'_t it picks on z(·|D∖D_{i,n}) and z(·|∅).
    """
    response = list(response)
    if not isinstance(lam, (int, float)):
        if len(lam) != len(response):
            raise ValueError(f"need one lambda per response token ({len(response)}), "
                             f"got {len(lam)}")
        lam = [float(x) for x in lam]
    if bounded_eps is not None and not isinstance(lam, (int, float)):
        raise ValueError("with bounded_eps, lam is λ_max: one number, not one per token")
    request = WindowRequest(parts, response, list(spans), lam, temperature, min_new_tokens,
                            bounded_eps=bounded_eps)
    return window_influence_many(lm, [request], reuse_prefix=reuse_prefix)[0]


def window_influence_many(lm: LanguageModel, requests: Sequence[WindowRequest], *,
                          reuse_prefix: bool = True) -> list[WindowInfluence]:
    """:func:`window_influence` of several examples scored together: the no-context prompts of
    all of them in one planner run, then every example's full and ablated prompts in another,
    each example reusing the KV cache of its own full prompt's prefix (under a batch-invariant
    policy each example in passes of its own, see :mod:`ctxleak.engine.batching`)."""
    out: list[WindowInfluence | None] = [None] * len(requests)
    todo = []
    for k, r in enumerate(requests):
        if r.response:
            todo.append(k)
        else:
            out[k] = WindowInfluence(list(r.spans), np.zeros(0), np.zeros((len(r.spans), 0)))
    if not todo:
        return out  # type: ignore[return-value]

    def masked(k: int, logits: torch.Tensor) -> torch.Tensor:
        return mask_eos_before_min(logits, lm.eos_ids, requests[k].min_new_tokens)

    def keep(i: int, logits: torch.Tensor) -> torch.Tensor:
        return masked(todo[i], logits).float()  # the head gave float32: half the memory

    def weights(r: WindowRequest, z: torch.Tensor, z_e: torch.Tensor) -> float | torch.Tensor:
        if r.bounded_eps is not None:  # this context's own λ_t (Alg. 1)
            return bounded_lambdas(z, z_e, r.bounded_eps, float(r.lam),  # type: ignore[arg-type]
                                   r.temperature)[0]  # bounded CID has one λ (checked upstream)
        return r.lam if isinstance(r.lam, (int, float)) else \
            torch.as_tensor(list(r.lam), dtype=torch.float64)

    def uses_empty(r: WindowRequest) -> bool:
        # the no-context logits enter the CID mixture only where λ != 1 (cid_logprobs)
        if r.bounded_eps is not None:
            return True
        return r.lam != 1 if isinstance(r.lam, (int, float)) else any(x != 1 for x in r.lam)

    mixed = [g for g, k in enumerate(todo) if requests[k].with_empty or uses_empty(requests[k])]

    def empty_key(g: int) -> tuple[Any, ...]:
        r = requests[todo[g]]
        return tuple(r.parts.empty), tuple(r.response), r.min_new_tokens

    # one no-context pass per distinct (prompt, response): an answer scored under several
    # controls needs the same one each time (each request in a pass of its own, so sharing
    # it changes no number)
    first_of: dict[tuple[Any, ...], int] = {}
    for g in mixed:
        first_of.setdefault(empty_key(g), g)
    distinct = list(first_of.values())
    z_list = continuation_logits(lm, [requests[todo[g]].parts.empty for g in distinct],
                                 [list(requests[todo[g]].response) for g in distinct],
                                 reuse_prefix=False, examples=distinct,
                                 reduce=lambda i, z: keep(distinct[i], z)) if distinct else []
    by_key = dict(zip(first_of, z_list))
    z_empty = {g: by_key[empty_key(g)] for g in mixed}
    prompts, conts, groups = [], [], []
    for g, k in enumerate(todo):
        r = requests[k]
        variants = [r.parts.full] + [r.parts.with_context(r.parts.context[:a] + r.parts.context[b:])
                                     for a, b in r.spans]
        prompts += variants
        conts += [list(r.response)] * len(variants)
        groups += [g] * len(variants)

    def reduce(i: int, logits: torch.Tensor) -> np.ndarray:
        g = groups[i]
        r = requests[todo[g]]
        masked(todo[g], logits)
        z_e = z_empty[g].to(logits.device).double() if g in z_empty else logits
        logp = cid_logprobs(logits, z_e, weights(r, logits, z_e), r.temperature)
        target = torch.as_tensor(list(r.response), dtype=torch.long, device=logp.device)
        return logp.gather(1, target[:, None])[:, 0].cpu().numpy()

    given = {g: requests[k].prefix_cache for g, k in enumerate(todo)
             if requests[k].prefix_cache is not None}
    scored = continuation_logits(lm, prompts, conts, reuse_prefix=reuse_prefix,
                                 reduce=reduce, groups=groups, prefix_caches=given)
    begin = 0
    for g, k in enumerate(todo):
        r = requests[k]
        spans = list(r.spans)
        rows = scored[begin:begin + len(spans) + 1]
        begin += len(spans) + 1
        ablated = np.stack(rows[1:]) if spans else np.zeros((0, len(r.response)))
        empty = None
        if r.with_empty:
            logp = torch.log_softmax(z_empty[g].double() / r.temperature, dim=-1)
            target = torch.as_tensor(list(r.response), dtype=torch.long, device=logp.device)
            empty = logp.gather(1, target[:, None])[:, 0].cpu().numpy()
        out[k] = WindowInfluence(spans, rows[0], ablated, empty)
    return out  # type: ignore[return-value]


def next_token_unigram_influence(lm: LanguageModel, parts: PromptParts, prefix: Sequence[int],
                                 token: int, *, lam: float, temperature: float,
                                 min_new_tokens: int = 0) -> np.ndarray:
    """Influence of each single context token on one next token (Table 1):
    ``τ_i = |log p̄_λ(y | D, x, prefix) − log p̄_λ(y | D∖{d_i}, x, prefix)|``.

    The token follows ``prefix`` (response tokens already generated), so it is scored with the
    distribution it was sampled from: EOS masked when ``len(prefix) < min_new_tokens``, as in
    :func:`~ctxleak.mitigations.cid.generate_cid`, at the same λ and T.
    """
    spans = windows(len(parts.context), 1)
    res = window_influence(lm, PromptParts(parts.before, parts.context,
                                           tuple(parts.after) + tuple(prefix)),
                           [token], spans, lam=lam, temperature=temperature,
                           min_new_tokens=int(len(prefix) < min_new_tokens))
    return res.tau[:, 0]
