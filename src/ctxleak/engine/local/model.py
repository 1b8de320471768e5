"""The in-process backend: a transformers model and its tokenizer in this process, every
operation of :class:`~ctxleak.engine.lm.InProcessLM` and every capability. The operations are
the engine's in-process implementations (:mod:`ctxleak.engine.local.scoring`: prefix-shared KV
caches, batched forward passes; :mod:`ctxleak.engine.local.generation`: step-by-step generation
in one batched KV cache, transformers' beam search)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import IN_PROCESS
from ctxleak.engine.lm import InProcessLM, LogitTransform, ModelInfo
from ctxleak.engine.local import generation, scoring
from ctxleak.engine.streams import Generation, StreamJob


@dataclass
class LM(InProcessLM):
    """A causal language model loaded in this process (transformers), with its tokenizer and
    the conventions the engine needs: every operation of
    :class:`~ctxleak.engine.lm.LanguageModel`, and every capability."""

    model: Any
    tokenizer: Any
    info: ModelInfo
    use_chat_template: bool = False
    bos_ids: list[int] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    # how engine calls batch (ctxleak.engine.batching.using hands a run's policy to the model)
    batching: BatchPolicy = field(default_factory=BatchPolicy, repr=False, compare=False)
    capabilities: frozenset[str] = field(default=IN_PROCESS, repr=False, compare=False)

    def __repr__(self) -> str:
        """``LM(name='default', device='cpu', dtype='float32', params=135M)``, not the module
        tree."""
        try:
            n = sum(int(p.numel()) for p in self.model.parameters())
            params = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else str(n)
        except (AttributeError, TypeError):
            params = "?"
        return (f"LM(name={self.info.name!r}, device={self.info.device!r}, "
                f"dtype={self.info.dtype!r}, params={params})")

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' device (the first one under a device map)."""
        device: torch.device = self.model.get_input_embeddings().weight.device
        return device

    @property
    def vocab_size(self) -> int:
        """Size of the output distribution (the LM head), which may exceed the tokenizer's."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def max_length(self) -> int | None:
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None

    def run_options(self) -> dict[str, Any]:
        return {"model": self.info.name}

    def describe(self) -> str:
        return f"model {self.info.name} on {self.info.device} ({self.info.dtype})"

    # ---- operations: the engine's in-process implementations ----------------------------
    def continuation_logprobs(self, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]], *,
                              reuse_prefix: bool = True, batch_size: str | int | None = None,
                              logit_transform: LogitTransform | None = None,
                              groups: Sequence[int] | None = None,
                              examples: Sequence[int] | None = None) -> list[np.ndarray]:
        return scoring.continuation_logprobs(
            self, prompts, continuations, reuse_prefix=reuse_prefix, batch_size=batch_size,
            logit_transform=logit_transform, groups=groups, examples=examples)

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], *,
                            token_ids: Sequence[int] | None = None, reuse_prefix: bool = False,
                            batch_size: str | int | None = None,
                            logit_transform: LogitTransform | None = None,
                            groups: Sequence[int] | None = None,
                            examples: Sequence[int] | None = None) -> torch.Tensor:
        return scoring.next_token_logprobs(
            self, prompts, token_ids=token_ids, reuse_prefix=reuse_prefix,
            batch_size=batch_size, logit_transform=logit_transform, groups=groups,
            examples=examples)

    def continuation_logits(self, prompts: Sequence[Sequence[int]],
                            continuations: Sequence[Sequence[int]], *,
                            reduce: Callable[[int, torch.Tensor], object],
                            reuse_prefix: bool = True, batch_size: str | int | None = None,
                            groups: Sequence[int] | None = None,
                            examples: Sequence[int] | None = None,
                            prefix_caches: Mapping[int, Any] | None = None) -> list[Any]:
        return scoring.continuation_logits(
            self, prompts, continuations, reduce=reduce, reuse_prefix=reuse_prefix,
            batch_size=batch_size, groups=groups, examples=examples,
            prefix_caches=prefix_caches)

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
               temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
               ) -> list[list[Generation]]:
        return generation.sample(self, prompts, seeds, temperature=temperature,
                                 max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                                 n=n)

    def beam_search(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                    num_beams: int, batch_size: int | None = None) -> list[list[int]]:
        return generation.beam_search(self, prompts, max_new_tokens=max_new_tokens,
                                      num_beams=num_beams, batch_size=batch_size)

    def decode_streams(self, jobs: Sequence[StreamJob], stops: Sequence[int], *, sample: bool,
                       use_cache: bool = True, share_prefix: bool = True) -> list[Generation]:
        return generation.decode_streams(self, jobs, stops, sample=sample, use_cache=use_cache,
                                         share_prefix=share_prefix)
