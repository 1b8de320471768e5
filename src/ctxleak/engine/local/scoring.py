"""In-process scoring: next-token distributions and teacher-forced log-probabilities of fixed
continuations under many prompt variants, with the KV cache of a shared prefix computed once
(the :class:`~ctxleak.engine.lm.LanguageModel` scoring operations of a model in this process).

All log-softmaxes are taken in float64 and tokens are indexed by their exact ids. Only the
positions whose predictions are needed go through the LM head, in chunks, so no full
``[batch, length, vocab]`` tensor is ever built.

Prefix reuse: the first sequence (of each group, when several examples are scored together) is
the reference. Its KV cache is computed once; each variant keeps the part of it that matches its
own ids (up to its first scored position) and recomputes only what follows. In a batch every
variant takes its own prefix from its own reference (the caches cut and left-padded), so
variants of several examples share forward passes. Models with sliding-window layers, whose
caches cannot be padded, batch one example's variants together on the shortest prefix among
them, ordered by prefix length. Inside :func:`~ctxleak.engine.batching.shared_prefixes` the
reference caches are kept across calls, and a group's reference may be built on another
prompt's cache (``bases``: a control or decoy prompt on its example's own, up to where the two
differ), one fixed computation kept under both prompts' ids.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ctxleak.engine.batching import (
    SHARED_PREFIXES,
    SHARED_PREFIXES_KEPT,
    BatchPlanner,
    example_passes,
    planner_for,
    policy_of,
)
from ctxleak.engine.forward import (
    common_prefix_length,
    expand_cache,
    head_logits,
    hidden_states,
    left_pad,
    pad_id,
    right_pad,
)
from ctxleak.engine.lm import (
    EACH_PROMPT_WHOLE,
    PREFIXES_REUSED,
    InProcessLM,
    LogitTransform,
    ScoringPlan,
)
from ctxleak.engine.local.prefill import sliding_window

# Reusing a cached prefix shorter than this saves less than the cache copy costs.
MIN_REUSE_TOKENS = 16
HEAD_CHUNK = 64  # positions per LM-head call
REUSE_SLACK = 0.15  # recomputed shared-prefix tokens allowed per variant, as a share of its own


def _forward_ranges(lm: InProcessLM, seqs: Sequence[Sequence[int]], starts: Sequence[int],
                    consume: Callable[[int, torch.Tensor], object], plan: ScoringPlan
                    ) -> list[Any]:
    """Hidden states of ``seqs[i]`` at positions ``starts[i] .. len(seqs[i]) - 1``, handed to
    ``consume(i, hidden[n_i, d])``; returns the consumed results in request order. The
    ``plan``'s fields:

    ``groups[i]`` names the prompt group request i belongs to (None: all one group). Prefix
    reuse works within a group, against its first request; requests of several groups share the
    planner and its batches, so the examples measured together fill them.
    ``examples[i]`` names the example request i belongs to (default: its group): under the
    model's batch-invariant policy (:mod:`ctxleak.engine.batching`) each example's requests go
    through forward passes of their own, rows per pass from the token budget, so its floats do
    not depend on the other examples scored with it. ``batch_size``: rows per pass for this call
    only (None: the policy's).
    ``prefix_caches[g]``: a KV cache of group g's first sequence already computed (at least the
    prefix that reuse needs, in one batch-1 pass as here, e.g. by
    :func:`~ctxleak.engine.local.prefill.prefill_alone`), used instead of computing it again.
    ``bases[g]``: other ids group g's reference prefix is built on (:func:`reference_cache`'s
    ``base``), inside :func:`~ctxleak.engine.batching.shared_prefixes` only, where that
    base's cache is kept across calls (elsewhere it would be computed once per group)."""
    for i, (seq, start) in enumerate(zip(seqs, starts)):
        if not 0 <= start < len(seq):
            raise ValueError(f"request {i}: position {start} outside a sequence of {len(seq)}")
    group = list(plan.groups) if plan.groups is not None else [0] * len(seqs)
    if len(group) != len(seqs):
        raise ValueError("need one group per request")
    policy = policy_of(lm)
    rows = policy.scoring_batch_size if plan.batch_size is None else plan.batch_size
    planner = planner_for(lm, rows)
    parts = example_passes(policy, group if plan.examples is None else list(plan.examples))
    if len(parts) <= 1:
        return _forward_part(lm, seqs, starts, consume, plan, planner, group)
    out: list[Any] = [None] * len(seqs)
    for part in parts:
        def consume_part(k: int, hidden: torch.Tensor, part: list[int] = part) -> object:
            return consume(part[k], hidden)

        got = _forward_part(lm, [seqs[i] for i in part], [starts[i] for i in part],
                            consume_part, plan, planner, [group[i] for i in part])
        for i, result in zip(part, got):
            out[i] = result
    return out


def reference_cache(lm: InProcessLM, ids: Sequence[int], base: Sequence[int] | None = None
                    ) -> Any:
    """The KV cache of ``ids`` from one batch-1 pass, or from the store of
    :func:`~ctxleak.engine.batching.shared_prefixes` when it holds these ids.

    ``base``: other ids that ``ids`` share a prefix with (another prompt of the same example,
    its own full prompt): the cache is then ``base``'s (this function's, from the store when
    held) cut to that prefix, with the rest of ``ids`` computed on top of it in one batch-1
    pass. Its floats depend on ``ids`` and ``base`` alone, so it is stored under both. Without a
    prefix of :data:`MIN_REUSE_TOKENS` in common, or for a model with sliding-window layers
    (whose cache cannot be cut, :func:`~ctxleak.engine.local.prefill.sliding_window`), the
    cache is the plain one, and no base is computed only to find that out."""
    store = SHARED_PREFIXES.get()
    key = tuple(int(t) for t in ids)
    shared = 0 if base is None else min(common_prefix_length(key, base), len(key) - 1)
    if shared < MIN_REUSE_TOKENS or sliding_window(lm) is not None:
        base = None
    stored: Hashable = key if base is None else (key, tuple(int(t) for t in base))
    if store is not None and stored in store:
        store.move_to_end(stored)
        return store[stored]
    with torch.inference_mode():
        below = None if base is None else reference_cache(lm, base)
        if below is not None and not _plain_layers(below):
            return reference_cache(lm, ids)
        tensor = torch.tensor([list(key[shared:] if below is not None else key)],
                              device=lm.device)
        if below is None:
            _, cache = hidden_states(lm, tensor, torch.ones_like(tensor), use_cache=True)
        else:
            positions = torch.arange(shared, len(key), device=lm.device)[None]
            _, cache = hidden_states(lm, tensor, None, positions,
                                     cache=expand_cache(below, shared, 1), use_cache=True)
    if store is not None:
        _keep(store, stored, cache)
    return cache


def _keep(store: OrderedDict[Hashable, Any], key: Hashable, cache: Any) -> None:
    """``cache`` kept in the store under ``key`` as its most recent, the oldest dropped past
    :data:`~ctxleak.engine.batching.SHARED_PREFIXES_KEPT`."""
    store[key] = cache
    store.move_to_end(key)
    while len(store) > SHARED_PREFIXES_KEPT:
        store.popitem(last=False)


def _reference_caches(lm: InProcessLM, seqs: Sequence[Sequence[int]], starts: Sequence[int],
                      group: Sequence[int], prefix_caches: Mapping[int, Any] | None,
                      bases: Mapping[int, Sequence[int]] | None = None
                      ) -> tuple[list[int], dict[int, Any]]:
    """Prefix reuse: each request's reusable prefix (its common prefix with its group's first
    sequence, up to its first scored position; 0 where the group's longest is under
    ``MIN_REUSE_TOKENS``) and each group's reference KV cache (given, or computed here in one
    batch-1 pass, on ``bases[g]`` where given and the store is on)."""
    first: dict[int, int] = {}
    for i, g in enumerate(group):
        first.setdefault(g, i)
    prefix = [0] * len(seqs)
    ref_caches: dict[int, Any] = {}
    store = SHARED_PREFIXES.get()
    shared = store is not None
    for g, ref_index in first.items():
        members = [i for i in range(len(seqs)) if group[i] == g]
        if len(members) < 2 and not shared:  # alone, its own prefix is not worth a cache
            continue
        ref = seqs[ref_index]
        for i in members:
            prefix[i] = min(common_prefix_length(seqs[i], ref), starts[i])
        longest = max(prefix[i] for i in members)
        given = (prefix_caches or {}).get(g)
        if longest >= MIN_REUSE_TOKENS and given is not None \
                and given.get_seq_length() >= longest:
            ref_caches[g] = given  # the positions past ``longest`` are never read
            if store is not None and given.get_seq_length() == longest + 1:
                # prefill_alone's: its first ``longest`` positions are one batch-1 pass over
                # exactly these ids, as this store's caches are (a base for the prompt's variants)
                _keep(store, tuple(int(t) for t in ref[:longest]), given)
        elif longest >= MIN_REUSE_TOKENS:
            base = (bases or {}).get(g) if shared else None
            ref_caches[g] = reference_cache(lm, ref[:longest], base)
        else:
            for i in members:
                prefix[i] = 0
    return prefix, ref_caches


def _forward_part(lm: InProcessLM, seqs: Sequence[Sequence[int]], starts: Sequence[int],
                  consume: Callable[[int, torch.Tensor], object], plan: ScoringPlan,
                  planner: BatchPlanner, group: Sequence[int]) -> list[Any]:
    """:func:`_forward_ranges` of requests that may share forward passes: prefix reuse planned,
    then the planner's batches, ordered so that batching never undoes the prefix saving."""
    reuse_prefix = plan.reuse_prefix
    prefix, ref_caches = _reference_caches(lm, seqs, starts, group, plan.prefix_caches,
                                           plan.bases) if reuse_prefix else ([0] * len(seqs), {})
    mergeable = bool(ref_caches) and all(_plain_layers(c) for c in ref_caches.values())
    cached = [group[i] in ref_caches and (prefix[i] >= MIN_REUSE_TOKENS or not mergeable)
              for i in range(len(seqs))]

    def run_batch(batch: list[int]) -> list[Any]:
        with torch.inference_mode():
            hidden, offsets = _batch_hidden(lm, seqs, batch, prefix, ref_caches, group,
                                            mergeable and cached[batch[0]])
            out = []
            for row, i in enumerate(batch):
                a = starts[i] + offsets[row]
                b = len(seqs[i]) + offsets[row]
                out.append(consume(i, hidden[row, a:b]))
            return out

    costs = [len(s) - p for s, p in zip(seqs, prefix)]
    if not reuse_prefix or not ref_caches:
        return planner.run([len(s) for s in seqs], run_batch)
    if mergeable:
        # every request reuses exactly its own prefix (of its own group's cache), so requests of
        # any group share a batch: those with a cached prefix by suffix length, the rest after
        costs = [c if cached[i] else len(seqs[i]) for i, c in enumerate(costs)]
        order = sorted(range(len(seqs)), key=lambda i: (not cached[i], -costs[i]))
        return planner.run(costs, run_batch, order=order,
                           joins=lambda batch, i: cached[i] == cached[batch[0]])
    # A cache that cannot be padded (sliding-window layers): requests without a cached prefix
    # first (any group, longest first), then each group's: longest shared prefix first, then
    # longest suffix. A variant joins a batch only while the tokens the batch would recompute
    # for it (its prefix beyond the batch's shortest) stay a small part of its own work, so
    # batching never undoes the prefix saving.
    order = sorted(range(len(seqs)), key=lambda i: (cached[i], group[i] if cached[i] else 0,
                                                    -prefix[i], -costs[i]))

    def joins(batch: list[int], i: int) -> bool:
        j0 = batch[0]
        if cached[i] != cached[j0] or (cached[i] and group[i] != group[j0]):
            return False
        return max(prefix[j] for j in batch) - prefix[i] <= REUSE_SLACK * costs[i]

    return planner.run(costs, run_batch, order=order, joins=joins)


def _batch_hidden(lm: InProcessLM, seqs: Sequence[Sequence[int]], batch: list[int], prefix: list[int],
                  ref_caches: Mapping[int, Any], group: Sequence[int], own_prefixes: bool
                  ) -> tuple[torch.Tensor, list[int]]:
    """Hidden states of one batch of requests and, per row, the offset from a sequence position
    to its column: each row after its own cached prefix (``own_prefixes``), all rows after the
    batch's shortest shared prefix, or whole left-padded sequences."""
    pad, device = pad_id(lm), lm.device
    shared = min(prefix[i] for i in batch)
    ref_cache = ref_caches.get(group[batch[0]])
    if own_prefixes:
        hidden = _forward_after_own_prefixes(lm, [seqs[i] for i in batch],
                                             [prefix[i] for i in batch],
                                             [ref_caches[group[i]] for i in batch], pad)
        return hidden, [-prefix[i] for i in batch]
    if shared >= MIN_REUSE_TOKENS and ref_cache is not None:
        cache = expand_cache(ref_cache, shared, len(batch))
        ids, mask, pos = right_pad([seqs[i][shared:] for i in batch], pad, device, shared)
        full_mask = None  # no padding: let the attention take its unmasked path
        if not bool(mask.all()):
            full_mask = torch.cat([torch.ones((len(batch), shared), dtype=mask.dtype,
                                              device=device), mask], dim=1)
        hidden, _ = hidden_states(lm, ids, full_mask, pos, cache=cache, use_cache=True)
        return hidden, [-shared] * len(batch)
    ids, mask, pos = left_pad([seqs[i] for i in batch], pad, device)
    hidden, _ = hidden_states(lm, ids, mask, pos)
    width = ids.shape[1]
    return hidden, [width - len(seqs[i]) for i in batch]


def _plain_layers(cache: Any) -> bool:
    """Whether ``cache`` is per-layer key/value tensors ``[batch, heads, length, dim]`` that can
    be cut and padded (no sliding-window layer, which counts slots rather than positions)."""
    layers: Any = getattr(cache, "layers", None)
    return bool(layers) and all(hasattr(layer, "keys") and not getattr(layer, "is_sliding", False)
                                for layer in layers)


def _forward_after_own_prefixes(lm: InProcessLM, seqs: Sequence[Sequence[int]], prefixes: Sequence[int],
                                refs: Sequence[Any], pad: int) -> torch.Tensor:
    """Hidden states of ``seqs[r][prefixes[r]:]`` for each row r, its first ``prefixes[r]``
    positions taken from the cache ``refs[r]`` (its example's reference prompt): the rows' cached
    prefixes are left-padded with zeros to the longest (masked out), their own tokens
    right-padded after it, with position ids that carry on from each row's own prefix."""
    device = lm.device
    longest = max(prefixes)
    ids, own_mask, _ = right_pad([s[p:] for s, p in zip(seqs, prefixes)], pad, device)
    width = ids.shape[1]
    pos = (torch.as_tensor(list(prefixes), device=device)[:, None]
           + torch.arange(width, device=device)[None])
    mask = torch.zeros((len(seqs), longest), dtype=own_mask.dtype, device=device)
    for r, p in enumerate(prefixes):
        mask[r, longest - p:] = 1
    mask = torch.cat([mask, own_mask], dim=1)
    cache = expand_cache(refs[0], prefixes[0], 1)  # a fresh cache object to fill
    for i, layer in enumerate(cache.layers):
        for name in ("keys", "values"):
            rows = []
            for ref, p in zip(refs, prefixes):
                t = getattr(ref.layers[i], name)[:, :, :p]
                if p < longest:
                    t = torch.cat([t.new_zeros((*t.shape[:2], longest - p, t.shape[3])), t], dim=2)
                rows.append(t)
            setattr(layer, name, torch.cat(rows))
    full = None if bool(mask.all()) else mask
    hidden, _ = hidden_states(lm, ids, full, pos, cache=cache, use_cache=True)
    return hidden


def _log_softmax_rows(lm: InProcessLM, hidden: torch.Tensor, index: int,
                      transform: LogitTransform | None) -> torch.Tensor:
    logits = torch.cat([head_logits(lm, hidden[k:k + HEAD_CHUNK]).double()
                        for k in range(0, hidden.shape[0], HEAD_CHUNK)])
    if transform is not None:
        logits = transform(index, logits)
    return torch.log_softmax(logits, dim=-1)


def next_token_logprobs(lm: InProcessLM, prompts: Sequence[Sequence[int]], *,
                        token_ids: Sequence[int] | None = None,
                        plan: ScoringPlan = EACH_PROMPT_WHOLE,
                        logit_transform: LogitTransform | None = None) -> torch.Tensor:
    """:func:`ctxleak.engine.scoring.next_token_logprobs` in-process."""
    cols = None if token_ids is None else torch.as_tensor(list(token_ids), dtype=torch.long)

    def consume(i: int, hidden: torch.Tensor) -> torch.Tensor:
        logp = _log_softmax_rows(lm, hidden, i, logit_transform)[0]
        if cols is not None:
            logp = logp[cols.to(logp.device)]
        return logp.cpu()

    starts = [len(p) - 1 for p in prompts]
    rows = _forward_ranges(lm, prompts, starts, consume, plan)
    return torch.stack(rows)


def continuation_logprobs(lm: InProcessLM, prompts: Sequence[Sequence[int]],
                          continuations: Sequence[Sequence[int]], *,
                          plan: ScoringPlan = PREFIXES_REUSED,
                          logit_transform: LogitTransform | None = None) -> list[np.ndarray]:
    """:func:`ctxleak.engine.scoring.continuation_logprobs` in-process, one continuation per
    prompt (checked)."""
    results: list[np.ndarray] = [np.zeros(0)] * len(prompts)
    todo = [i for i in range(len(prompts)) if continuations[i]]
    if not todo:
        return results
    seqs = [list(prompts[i]) + list(continuations[i]) for i in todo]
    starts = [len(prompts[i]) - 1 for i in todo]

    def consume(k: int, hidden: torch.Tensor) -> np.ndarray:
        i = todo[k]
        hidden = hidden[:len(continuations[i])]
        logp = _log_softmax_rows(lm, hidden, i, logit_transform)
        target = torch.as_tensor(continuations[i], dtype=torch.long, device=logp.device)
        return logp.gather(1, target[:, None])[:, 0].cpu().numpy()

    groups, examples = plan.groups, plan.examples
    scored = _forward_ranges(lm, seqs, starts, consume, replace(
        plan, groups=None if groups is None else [groups[i] for i in todo],
        examples=None if examples is None else [examples[i] for i in todo]))
    for k, i in enumerate(todo):
        results[i] = scored[k]
    return results


def continuation_logits(lm: InProcessLM, prompts: Sequence[Sequence[int]],
                        continuations: Sequence[Sequence[int]], *,
                        reduce: Callable[[int, torch.Tensor], object],
                        plan: ScoringPlan = PREFIXES_REUSED) -> list[Any]:
    """:func:`ctxleak.engine.scoring.continuation_logits` in-process, one continuation per
    prompt (checked)."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, continuations)]
    starts = [len(p) - 1 for p in prompts]

    def consume(i: int, hidden: torch.Tensor) -> object:
        hidden = hidden[:len(continuations[i])]
        logits = torch.cat([head_logits(lm, hidden[k:k + HEAD_CHUNK]).double()
                            for k in range(0, hidden.shape[0], HEAD_CHUNK)])
        return reduce(i, logits)

    return _forward_ranges(lm, seqs, starts, consume, plan)
