"""Scoring: next-token distributions and teacher-forced log-probabilities of fixed continuations
under many prompt variants, the backend-free functions every method calls.

Each function checks its arguments and calls the model's own operation
(:class:`~ctxleak.engine.lm.LanguageModel`): in-process, :mod:`ctxleak.engine.local.scoring`
(float64 log-softmaxes, the KV cache of a shared prefix computed once); a served model answers
over HTTP (its server's prefix cache does the reuse), and refuses, in the operation itself, the
full logits and logit transforms that need the model in-process
(:mod:`ctxleak.engine.capabilities`). Inside :func:`shared_prefixes` an in-process model keeps
the reference prefixes it computed across calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch

from ctxleak.engine.lm import LanguageModel, LogitTransform, ScoringPlan

__all__ = ["continuation_logits", "continuation_logprobs", "next_token_logprobs"]


def next_token_logprobs(lm: LanguageModel, prompts: Sequence[Sequence[int]], *,
                        token_ids: Sequence[int] | None = None, reuse_prefix: bool = False,
                        batch_size: str | int | None = None,
                        logit_transform: LogitTransform | None = None,
                        groups: Sequence[int] | None = None,
                        examples: Sequence[int] | None = None) -> torch.Tensor:
    """``log p(· | prompt)`` for each prompt: float64 ``[N, V]`` (CPU), or ``[N, len(token_ids)]``
    when ``token_ids`` is given (log-softmax over the full vocabulary, then those columns).
    ``groups``: the prompt group of each prompt (prefix reuse within a group), ``examples``:
    its example (default: its group), ``batch_size``: rows per pass for this call only (None:
    the model's batching policy); see :mod:`ctxleak.engine.local.scoring`."""
    plan = ScoringPlan(reuse_prefix=reuse_prefix, batch_size=batch_size, groups=groups,
                       examples=examples)
    return lm.next_token_logprobs(prompts, token_ids=token_ids, plan=plan,
                                  logit_transform=logit_transform)


def continuation_logprobs(lm: LanguageModel, prompts: Sequence[Sequence[int]],
                          continuations: Sequence[int] | Sequence[Sequence[int]], *,
                          reuse_prefix: bool = True, batch_size: str | int | None = None,
                          logit_transform: LogitTransform | None = None,
                          groups: Sequence[int] | None = None,
                          examples: Sequence[int] | None = None) -> list[np.ndarray]:
    """Teacher-forced ``log p(y_t | prompt_i, y_<t)`` of each continuation (float64 arrays).

    ``continuations`` is one id list shared by all prompts, or one list per prompt. Put the
    prompt whose prefix the others share (e.g. the full context) first to reuse its KV cache
    (first of its group, when ``groups`` names the prompt group of each prompt). ``examples``
    and ``batch_size``: see :mod:`ctxleak.engine.local.scoring`.
    """
    shared = bool(continuations) and isinstance(continuations[0], (int, np.integer))
    conts = _one_per_prompt(len(prompts), continuations, shared)
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: a continuation needs at least one prompt token")
    plan = ScoringPlan(reuse_prefix=reuse_prefix, batch_size=batch_size, groups=groups,
                       examples=examples)
    return lm.continuation_logprobs(prompts, conts, plan=plan, logit_transform=logit_transform)


def continuation_logits(lm: LanguageModel, prompts: Sequence[Sequence[int]],
                        continuation: Sequence[int] | Sequence[Sequence[int]], *,
                        reuse_prefix: bool = True, batch_size: str | int | None = None,
                        reduce: Callable[[int, torch.Tensor], object],
                        groups: Sequence[int] | None = None,
                        examples: Sequence[int] | None = None,
                        prefix_caches: Mapping[int, Any] | None = None,
                        bases: Mapping[int, Sequence[int]] | None = None) -> list[Any]:
    """Raw float64 logits ``[T, V]`` at each continuation position, reduced per prompt by
    ``reduce(i, logits)`` so that full-vocabulary tensors never pile up.

    ``continuation``: one id list for all prompts, or one per prompt. ``groups``: the example
    each prompt belongs to, when several examples are scored together (prefix reuse stays
    within an example, against its first prompt). ``prefix_caches``: the first prompt's KV cache
    of a group when already computed; ``bases``: other ids a group's first prompt shares a
    prefix with (its example's own full prompt), whose KV cache its own is built on in-process;
    ``examples`` and ``batch_size``: see :mod:`ctxleak.engine.local.scoring`. A served model
    leaves prefixes to its server's cache."""
    shared = not continuation or isinstance(continuation[0], (int, np.integer))
    conts = _one_per_prompt(len(prompts), continuation, shared)
    plan = ScoringPlan(reuse_prefix=reuse_prefix, batch_size=batch_size, groups=groups,
                       examples=examples, prefix_caches=prefix_caches, bases=bases)
    return lm.continuation_logits(prompts, conts, reduce=reduce, plan=plan)


def _one_per_prompt(n: int, continuations: Sequence[int] | Sequence[Sequence[int]],
                    shared: bool) -> list[list[int]]:
    """The continuation of each of ``n`` prompts: ``continuations`` as one id list ``shared`` by
    all of them, or one list per prompt (refused when there are not ``n``)."""
    if shared:
        conts = [list(cast(Sequence[int], continuations))] * n
    else:
        conts = [list(c) for c in cast(Sequence[Sequence[int]], continuations)]
    if len(conts) != n:
        raise ValueError("need one continuation per prompt, or one shared continuation")
    return conts
