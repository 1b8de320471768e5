"""The model interface: what every backend gives the engine and the methods.

A :class:`LanguageModel` is a tokenizer (text to exact token ids and back, shared by every
backend so that a prompt encodes to the same ids in-process and on a server) plus a few
list-in, list-out operations, as lm-evaluation-harness's ``LM`` has its few request types:

- :meth:`~LanguageModel.continuation_logprobs`: teacher-forced ``log p(y_t | prompt, y_<t)`` of
  a continuation under several prompts, float64;
- :meth:`~LanguageModel.next_token_logprobs`: ``log p(c | prompt)`` of candidate next tokens,
  or the whole next-token distribution where the backend has it;
- :meth:`~LanguageModel.continuation_logits`: raw logits at every continuation position
  (in-process only);
- :meth:`~LanguageModel.sample` and :meth:`~LanguageModel.beam_search`: generations with their
  token ids, seeded;
- in-process only (:class:`InProcessLM`), :meth:`~InProcessLM.decode_streams`: several prompt streams
  combined step by step (:mod:`ctxleak.engine.streams`);
- :meth:`~LanguageModel.decode_pairs`: answers of Context Influence Decoding that the backend
  decodes itself (:mod:`ctxleak.engine.pairs`; a vLLM server with ctxleak's plugin).

Each backend declares its :attr:`~LanguageModel.capabilities`
(:mod:`ctxleak.engine.capabilities`); an operation a backend lacks refuses in the operation
itself, through the same :func:`~ctxleak.engine.capabilities.check_capabilities` that refuses a
run before its first request. Backends: the in-process transformers model
(:class:`ctxleak.engine.local.LM`) and a served model (:mod:`ctxleak.engine.served`, one small
subclass per wire dialect). The engine's functions (:mod:`ctxleak.engine.scoring`,
:mod:`ctxleak.engine.generation`) check their arguments and call these operations; nothing above
the engine asks which backend it holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import CID_DECODING, WEIGHTS, check_capabilities
from ctxleak.engine.pairs import PairAnswer, PairJob
from ctxleak.engine.streams import Generation, StreamJob

#: ``transform(i, logits)`` applied to prompt i's raw logits before the log-softmax.
LogitTransform = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ScoringPlan:
    """How one scoring call's prompts go through an in-process model's forward passes (a
    served model leaves prefixes to its server's cache and reads none of it); see
    :mod:`ctxleak.engine.local.scoring`.

    ``reuse_prefix``: a group's shared prefix computed once, as a KV cache. ``batch_size``:
    rows per pass for this call only (None: the model's batching policy). ``groups``: the
    prompt group of each prompt (prefix reuse within a group, against its first prompt; None:
    one group). ``examples``: the example of each prompt (default: its group), whose prompts go
    through passes of their own under a batch-invariant policy. ``prefix_caches``: a group's
    first prompt's KV cache already computed. ``bases``: other ids a group's first prompt
    shares a prefix with, whose KV cache its own is built on inside
    :func:`~ctxleak.engine.batching.shared_prefixes`."""

    reuse_prefix: bool = True
    batch_size: str | int | None = None
    groups: Sequence[int] | None = None
    examples: Sequence[int] | None = None
    prefix_caches: Mapping[int, Any] | None = None
    bases: Mapping[int, Sequence[int]] | None = None


#: The plans the operations default to: shared prefixes reused, or each prompt whole.
PREFIXES_REUSED = ScoringPlan()
EACH_PROMPT_WHOLE = ScoringPlan(reuse_prefix=False)


def bos_convention(tokenizer: Any) -> list[int]:
    """The ids the tokenizer itself puts before a text (its BOS convention), usually [] or [bos]."""
    with_special = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    without = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    if without and with_special[-len(without):] == without:
        return with_special[:len(with_special) - len(without)]
    return []


def eos_convention(tokenizer: Any, generation_config: Any) -> list[int]:
    """All ids that end a response: the tokenizer's EOS and the generation config's (None: no
    generation config)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    extra = getattr(generation_config, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(i) for i in extra)
    return sorted(ids)


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    """What every backend records of its model, written into every ``results.json``
    (provenance): a backend's info adds its own facts to these."""

    name: str
    source: str  # in-process: "gguf", "hub", "local" or "in-memory"; "served"
    path: str
    dtype: str = "float32"
    device: str = "cpu"
    chat_template: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True, kw_only=True)
class ModelInfo(ModelFacts):
    """Provenance of a model loaded in this process."""

    revision: str | None = None
    file_sha256: str | None = None
    files_sha256: dict[str, str] | None = None  # model_fingerprint: file name -> SHA-256
    model_args: dict[str, Any] | None = None  # extra from_pretrained keywords (--model-args)


class LanguageModel(ABC):
    """A causal language model behind one interface: tokenizer, declared capabilities, the
    operations of the module docstring, and what names it in a run's config."""

    tokenizer: Any
    info: ModelFacts  # provenance: its to_dict() is written into every results.json
    use_chat_template: bool
    bos_ids: list[int]
    eos_ids: list[int]
    batching: BatchPolicy
    capabilities: frozenset[str]

    # ---- text -------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens (prompt pieces are joined by ids)."""
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens left out."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def token_strings(self, ids: list[int]) -> list[str]:
        """Each id decoded on its own (for heatmaps)."""
        return [self.tokenizer.decode([i]) for i in ids]

    # ---- facts ------------------------------------------------------------------------------
    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where returned tensors live; the batching policy's device kind."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Size of the next-token distribution."""

    @property
    @abstractmethod
    def max_length(self) -> int | None:
        """The longest sequence the model takes (None: unknown)."""

    def parameter_count(self) -> int | None:
        """How many parameters the model has, where the backend knows (None: it does not)."""
        return None

    @abstractmethod
    def run_options(self) -> dict[str, Any]:
        """The run options that name this model in a run's config (``model``; for a served one
        also ``server_url``, ``served_model``, ``tokenizer``)."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the console: which model, where."""

    def identity(self) -> dict[str, Any]:
        """What a resumed run compares, besides the run options and the model files' SHA-256,
        to be sure it measures the same model as the rows it keeps: what a server says of the
        model behind a name (empty where the files' hashes already tell)."""
        return {}

    def in_process(self, why: str, *, what: str = "this call") -> InProcessLM:
        """This model as one whose weights are in this process, for what only weights can do
        (gradients, soft prompts, transformers' own ``generate``); a backend without them is
        refused here, naming ``why``, by the same check that refuses a run before its first
        request: the check and the narrowing are one call."""
        check_capabilities(self, {WEIGHTS: why}, what=what)
        raise TypeError(f"{type(self).__name__} declares the weights but does not give them")

    def decode_pairs(self, jobs: Sequence[PairJob]) -> list[PairAnswer]:
        """Answers of Context Influence Decoding decoded by the backend itself, one per job
        (:data:`~ctxleak.engine.capabilities.CID_DECODING`); a backend without it is refused."""
        check_capabilities(self, {CID_DECODING: "the server decodes CID itself only with "
                                  "ctxleak's vLLM plugin loaded"}, what="this generation")
        raise TypeError(f"{type(self).__name__} declares CID decoding but does not do it")

    # ---- operations ------------------------------------------------------------------------
    @abstractmethod
    def continuation_logprobs(self, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]], *,
                              plan: ScoringPlan = PREFIXES_REUSED,
                              logit_transform: LogitTransform | None = None) -> list[np.ndarray]:
        """Teacher-forced ``log p(y_t | prompt_i, y_<t)`` of continuation i (float64), one
        continuation per prompt (checked by :func:`ctxleak.engine.scoring.continuation_logprobs`).
        ``logit_transform`` needs the logits (:data:`~ctxleak.engine.capabilities.NEXT_TOKEN_LOGITS`)."""

    @abstractmethod
    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], *,
                            token_ids: Sequence[int] | None = None,
                            plan: ScoringPlan = EACH_PROMPT_WHOLE,
                            logit_transform: LogitTransform | None = None) -> torch.Tensor:
        """``log p(· | prompt)``: float64 ``[N, V]`` on the CPU, or ``[N, len(token_ids)]``."""

    @abstractmethod
    def continuation_logits(self, prompts: Sequence[Sequence[int]],
                            continuations: Sequence[Sequence[int]], *,
                            reduce: Callable[[int, torch.Tensor], object],
                            plan: ScoringPlan = PREFIXES_REUSED) -> list[Any]:
        """Raw float64 logits ``[T, V]`` at each continuation position, reduced per prompt."""

    @abstractmethod
    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
               temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
               ) -> list[list[Generation]]:
        """``n`` responses to each prompt, response j of prompt i seeded by ``seeds[i] + j``
        (``temperature`` 0: greedy), EOS masked before ``min_new_tokens``."""

    @abstractmethod
    def beam_search(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                    num_beams: int, batch_size: int | None = None) -> list[list[int]]:
        """The best beam's new token ids for each prompt (greedy at one beam), EOS and what
        follows it dropped."""


class InProcessLM(LanguageModel):
    """A model whose weights are in this process (``model``: the transformers module): the
    type the engine's in-process internals (forward passes, prefill, gradients) work on, with
    one operation more, :meth:`decode_streams`."""

    model: Any

    def in_process(self, why: str, *, what: str = "this call") -> InProcessLM:
        return self

    @abstractmethod
    def decode_streams(self, jobs: Sequence[StreamJob], stops: Sequence[int], *, sample: bool,
                       use_cache: bool = True, share_prefix: bool = True) -> list[Generation]:
        """One generation per job (each checked already), every job's prompt streams decoded
        from the model's logits step by step (:func:`ctxleak.engine.streams.take_step`), ``stops``
        ending a job (masked before its minimum length). The floats are those of the batched
        passes: :func:`ctxleak.engine.generation.generate_many` replays them under a
        batch-invariant policy."""

    def parameter_count(self) -> int | None:
        try:
            return int(sum(p.numel() for p in self.model.parameters()))
        except (AttributeError, TypeError):
            return None
