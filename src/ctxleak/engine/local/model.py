"""The in-process backend: a transformers model and its tokenizer in this process, every
operation of :class:`~ctxleak.engine.lm.InProcessLM` and every capability. The operations are
the engine's in-process functions themselves (:mod:`ctxleak.engine.local.scoring`: prefix-shared KV
caches, batched forward passes; :mod:`ctxleak.engine.local.generation`: step-by-step generation
in one batched KV cache, transformers' beam search)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import IN_PROCESS
from ctxleak.engine.lm import InProcessLM, ModelInfo
from ctxleak.engine.local import generation, scoring


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

    # ---- operations: the engine's in-process functions themselves (the model their first
    # argument); mypy checks each against the interface's signature -----------------------
    continuation_logprobs = scoring.continuation_logprobs
    next_token_logprobs = scoring.next_token_logprobs
    continuation_logits = scoring.continuation_logits
    sample = generation.sample
    beam_search = generation.beam_search
    decode_streams = generation.decode_streams
