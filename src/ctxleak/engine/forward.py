"""Low-level forward passes shared by the engine: padding with attention masks and position ids,
hidden states from the base model, and the LM head applied only where logits are needed."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from ctxleak.engine.lm import InProcessLM
from ctxleak.engine.progress import count_tokens


def pad_id(lm: InProcessLM) -> int:
    tok = lm.tokenizer
    return int(next(c for c in (tok.pad_token_id, tok.eos_token_id, 0) if c is not None))


def left_pad(seqs: Sequence[Sequence[int]], pad: int, device: torch.device | str
             ) -> tuple[torch.Tensor, ...]:
    """Left-padded ids, attention mask and position ids (0 at each sequence's first real token)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq):] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def right_pad(seqs: Sequence[Sequence[int]], pad: int, device: torch.device | str,
              offset: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, their mask and position ids starting at ``offset`` (a cached prefix)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, :len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, :len(seq)] = 1
    positions = offset + torch.arange(width).unsqueeze(0).expand(len(seqs), width)
    return ids.to(device), mask.to(device), positions.contiguous().to(device)


def hidden_states(lm: InProcessLM, input_ids: torch.Tensor | None = None,
                  attention_mask: torch.Tensor | None = None,
                  position_ids: torch.Tensor | None = None, cache: Any = None,
                  use_cache: bool = False, inputs_embeds: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, Any]:
    """Last hidden states of the base model (no LM head) and the updated KV cache."""
    shaped = input_ids if input_ids is not None else inputs_embeds
    if shaped is not None:  # the positions computed, for the run's progress bar
        count_tokens(int(shaped.shape[0]) * int(shaped.shape[1]))
    base: Any = lm.model.base_model
    name = _cache_name(base.__class__)
    out = base(input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
               position_ids=position_ids, use_cache=use_cache, **{name: cache})
    return out.last_hidden_state, (out[name] if use_cache else None)


@functools.cache
def _cache_name(model_class: Any) -> str:
    """The name the model's forward takes its KV cache under: ``cache`` in the transformers
    releases that renamed it (the old name then warns on every call), else
    ``past_key_values``; the model's output carries it under the same name."""
    names = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in names else "past_key_values"


def head_logits(lm: InProcessLM, hidden: torch.Tensor) -> torch.Tensor:
    """LM-head logits for the given hidden states, with the model's final soft-capping if any."""
    logits: torch.Tensor = lm.model.get_output_embeddings()(hidden)
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def expand_cache(cache: Any, length: int, batch: int) -> Any:
    """A copy of a batch-1 KV cache cut to its first ``length`` positions and repeated ``batch``
    times (the shared prefix of a batch of prompt variants)."""
    new = copy.deepcopy(cache)
    extra = new.get_seq_length() - length
    if extra > 0:
        new.crop(-extra)  # transformers >= 5: a negative count removes that many positions
    if batch > 1:
        new.batch_repeat_interleave(batch)
    return new


class PrefixKV:
    """KV caches of prompt prefixes that many calls share (a chat template's system turn before
    every query), computed once and handed out as copies, so the tokens before the part that
    varies go through the model once per run rather than once per call.

    The caches belong to the model's weights at the time they were computed: make a new store
    after changing the weights. At most ``size`` prefixes are kept (oldest dropped first).
    """

    def __init__(self, lm: InProcessLM, size: int = 4) -> None:
        self.lm = lm
        self.size = size
        self._store: dict[tuple[int, ...], Any] = {}
        self.hits = 0

    def get(self, ids: Sequence[int]) -> Any:
        """A fresh batch-1 cache holding ``ids`` (the caller may extend it)."""
        key = tuple(int(i) for i in ids)
        if key in self._store:
            self.hits += 1
        else:
            with torch.no_grad():
                tensor = torch.as_tensor([list(key)], dtype=torch.long, device=self.lm.device)
                _, cache = hidden_states(self.lm, tensor, torch.ones_like(tensor), use_cache=True)
            if len(self._store) >= self.size:
                self._store.pop(next(iter(self._store)))
            self._store[key] = cache
        return copy.deepcopy(self._store[key])


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
