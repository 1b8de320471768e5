"""Prefill: the prompts of a generation through the model once, into one left-padded KV cache
that decoding then extends (:func:`~ctxleak.engine.local.generation.decode_streams`).

Three shapes, chosen by :func:`prefill` to compute the fewest positions with the same numbers up
to float noise:

- the tokens every row begins with (an instruction, a chat template's system turn) once, its cache
  repeated for every row (:func:`prefill_shared`), when that beats padding;
- rows of similar length together (:func:`prefill_buckets`): CID's prompt without the context is
  much shorter than the one with it, and padding it to the longest would compute the padding (a
  third of the positions on the demo set);
- a prompt alone in the shape of scoring's reference prefix (:func:`prefill_alone`), so that its
  KV cache can be handed to teacher-forced scoring
  (:func:`~ctxleak.engine.scoring.continuation_logits`'s ``prefix_caches``): the very numbers
  scoring would compute, one forward pass per example fewer there.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import Any

import torch

from ctxleak.engine.forward import common_prefix_length, hidden_states, left_pad
from ctxleak.engine.lm import InProcessLM

# A shared prefix shorter than this is not worth a separate forward pass and a cache copy.
MIN_SHARED_PREFIX = 8
# Prefill rows go in one bucket while they are at least this share of its longest row.
BUCKET_RATIO = 0.75

Prefilled = tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]
"""(last hidden state of each row ``[rows, 1, d]``, the KV cache, attention mask, position ids)."""


def prefill(lm: InProcessLM, seqs: Sequence[Sequence[int]], pad: int, *, share_prefix: bool = True,
            longest_new: int = 0, alone: dict[int, Any] | None = None) -> Prefilled:
    """Prefill ``seqs`` (left-padded) in the cheapest shape. ``share_prefix``: the tokens every
    row begins with may go through the model once (on sliding-window models only when the rows
    and ``longest_new`` new tokens fit in the window). ``alone``: rows prefilled each by
    :func:`prefill_alone`, no shared prefix; their caches are stored in ``alone[row]``."""
    window = sliding_window(lm)
    if alone and window is None:
        return prefill_buckets(lm, seqs, pad, alone)
    shared = shared_prefix_length(seqs) if share_prefix else 0
    if window is not None and max(len(s) for s in seqs) + longest_new > window:
        # a sliding window counts cache slots, not positions: the padding between the
        # prefix and a short stream's tokens would push real tokens out of its window
        shared = 0
    if shared >= MIN_SHARED_PREFIX and shared_prefill_pays(seqs, shared):
        return prefill_shared(lm, seqs, shared, pad)
    return prefill_buckets(lm, seqs, pad)


def sliding_window(lm: InProcessLM) -> int | None:
    """The model's sliding attention window in tokens, if any of its layers has one (Gemma 3,
    Mistral; Qwen2 only with ``use_sliding_window``)."""
    config = getattr(lm.model, "config", None)
    config = getattr(config, "text_config", None) or config
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def shared_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence has in common, leaving each at least one token of
    its own (the last prompt token must go through the model to give the first logits)."""
    if len(seqs) < 2:
        return 0
    n = min(len(s) for s in seqs) - 1
    first = seqs[0]
    for s in seqs[1:]:
        n = min(n, common_prefix_length(first, s))
    return max(n, 0)


def prefill_shared(lm: InProcessLM, seqs: Sequence[Sequence[int]], shared: int, pad: int) -> Prefilled:
    """Prefill: the shared prefix once (batch 1), its cache repeated for every stream, then each
    stream's own tokens left-padded after it. The padding sits between the prefix and the
    stream's tokens, masked out; position ids carry on from the prefix without gaps."""
    device = lm.device
    head = torch.as_tensor([list(seqs[0][:shared])], dtype=torch.long, device=device)
    _, cache = hidden_states(lm, head, torch.ones_like(head), use_cache=True)
    cache.batch_repeat_interleave(len(seqs))  # a fresh cache: repeated in place, not copied
    ids, own_mask, own_pos = left_pad([s[shared:] for s in seqs], pad, device)
    mask = torch.cat([torch.ones((len(seqs), shared), dtype=own_mask.dtype, device=device),
                      own_mask], dim=1)
    pos = own_pos + shared
    hidden, cache = hidden_states(lm, ids, mask, pos, cache=cache, use_cache=True)
    return hidden, cache, mask, pos


def buckets(seqs: Sequence[Sequence[int]], alone: Collection[int] = ()) -> list[list[int]]:
    """The prefill buckets of :func:`prefill_buckets`: each row of ``alone`` by itself, the
    others longest first, a row joining the open bucket while it is at least ``BUCKET_RATIO`` of
    that bucket's longest row."""
    order = sorted((r for r in range(len(seqs)) if r not in alone), key=lambda r: -len(seqs[r]))
    out: list[list[int]] = [[r] for r in sorted(alone)]
    for r in order:
        if (out and out[-1][0] not in alone
                and len(seqs[r]) >= BUCKET_RATIO * len(seqs[out[-1][0]])):
            out[-1].append(r)
        else:
            out.append([r])
    return out


def shared_prefill_pays(seqs: Sequence[Sequence[int]], shared: int) -> bool:
    """Whether prefilling the ``shared`` leading tokens once (:func:`prefill_shared`, every
    row's own tokens then padded to the longest) computes fewer positions than the bucketed
    prefill: a chat template's 24 shared tokens do not pay for padding CID's short no-context
    prompts to the long ones (5,528 positions against about 3,700 on 16 demo examples)."""
    longest = max(len(s) for s in seqs)
    with_shared = shared + len(seqs) * (longest - shared)
    bucketed = sum(len(b) * max(len(seqs[r]) for r in b) for b in buckets(seqs))
    return with_shared < bucketed


def prefill_buckets(lm: InProcessLM, seqs: Sequence[Sequence[int]], pad: int,
                    alone: dict[int, Any] | None = None) -> Prefilled:
    """Prefill of left-padded rows, rows of similar length together (the module docstring says
    why). Each bucket is left-padded to its own longest row and goes through the model alone;
    the caches are then left-padded with zeros (masked out) to the longest row and put back in
    row order. Mask and position ids are
    those of left-padding every row to the longest, so decoding goes on as after one prefill.
    Models whose cache is not plain per-layer tensors (sliding windows) get one prefill.

    ``alone``: rows prefilled each in its own bucket by :func:`prefill_alone`, whose caches are
    stored in ``alone[row]`` (read-only from then on: the merged cache is a new object)."""
    device = lm.device
    ids, mask, pos = left_pad(seqs, pad, device)
    own = {} if alone is None else alone
    groups = buckets(seqs, own)
    if (len(groups) == 1 and not own) or sliding_window(lm) is not None:
        hidden, cache = hidden_states(lm, ids, mask, pos, use_cache=True)
        return hidden[:, -1:], cache, mask, pos
    width = ids.shape[1]
    parts, caches = [], []
    for bucket in groups:
        if bucket[0] in own:
            hidden, cache = prefill_alone(lm, seqs[bucket[0]])
            own[bucket[0]] = cache
        else:
            b_ids, b_mask, b_pos = left_pad([seqs[r] for r in bucket], pad, device)
            hidden, cache = hidden_states(lm, b_ids, b_mask, b_pos, use_cache=True)
        parts.append(hidden[:, -1:])
        caches.append(cache)
    merged = copy.deepcopy(caches[0]) if groups[0][0] in own else caches[0]
    layers: list[Any] = [getattr(c, "layers", None) for c in caches]
    if any(ls is None or any(not hasattr(layer, "keys") or getattr(layer, "is_sliding", False)
                             for layer in ls) for ls in layers):
        hidden, cache = hidden_states(lm, ids, mask, pos, use_cache=True)  # unknown cache type
        return hidden[:, -1:], cache, mask, pos
    back = torch.as_tensor([k for k, _ in sorted(enumerate(r for b in groups for r in b),
                                                  key=lambda kr: kr[1])],
                           dtype=torch.long, device=device)

    def padded(t: torch.Tensor) -> torch.Tensor:
        extra = width - t.shape[-2]
        if extra == 0:
            return t
        return torch.cat([t.new_zeros((*t.shape[:-2], extra, t.shape[-1])), t], dim=-2)

    for i, layer in enumerate(merged.layers):
        layer.keys = torch.cat([padded(ls[i].keys) for ls in layers])[back]
        layer.values = torch.cat([padded(ls[i].values) for ls in layers])[back]
    return torch.cat(parts)[back], merged, mask, pos


def prefill_alone(lm: InProcessLM, prompt: Sequence[int]) -> tuple[torch.Tensor, Any]:
    """One prompt's prefill in the canonical shape of scoring's reference prefix
    (:func:`ctxleak.engine.scoring.continuation_logits`): all but its last token in one pass
    (batch 1, no padding), then the last token on that cache. Returns the last token's hidden
    state ``[1, 1, d]`` and the cache, whose first ``len(prompt) - 1`` positions are then the
    very numbers scoring would compute for that prefix."""
    device = lm.device
    head = torch.as_tensor([list(prompt[:-1])], dtype=torch.long, device=device)
    _, cache = hidden_states(lm, head, torch.ones_like(head), use_cache=True)
    last = torch.as_tensor([[int(prompt[-1])]], dtype=torch.long, device=device)
    hidden, cache = hidden_states(lm, last, torch.ones((1, len(prompt)), dtype=torch.long,
                                                       device=device),
                                  torch.as_tensor([[len(prompt) - 1]], device=device),
                                  cache=cache, use_cache=True)
    return hidden, cache
