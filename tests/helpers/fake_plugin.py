"""A fake vLLM server with ctxleak's CID plugin: the fake server (:mod:`helpers.fake_server`)
on a tiny in-process model, whose completions requests that carry the plugin's ``vllm_xargs``
are decoded as vLLM's engine would with the plugin loaded. Each engine step computes the raw
float32 next-token logits of every request in the batch, hands them to the plugin's own
:class:`~ctxleak.plugins.cid_pairs.PairBook` (the code that runs inside vLLM) and appends the
token it forces; the records are served at ``/v1/ctxleak/pairs/{id}`` as the plugin's route
serves them.

``faults`` break the engine on purpose, one per pair request in order (then none):
``"late"`` (the no-context request joins a step after the other), ``"drop"`` (it leaves the
batch after two steps, as a preempted request does), ``"short"`` (its ``max_tokens`` is one
less), ``"repeat"`` (step 1 runs twice, as a discarded sample is run again), ``"lie"`` (the
records claim a positive log-prob). A request's ``vllm_xargs`` are checked as the plugin's
``validate_params`` checks them at admission (HTTP 400 naming the field), and the book knows
the model's vocabulary, as the plugin's does.

A request with one prompt of a pair (what vLLM's data-parallel router makes of an answer whose
two prompts it sends to two engines) runs alone, and the book voids it at its first step.
``records``: a dict several fake engines share, as the engines of one server share the
plugin's records folder.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from ctxleak.plugins.cid_pairs import PairBook
from ctxleak.plugins.protocol import (
    PAIRS_PATH,
    PROTOCOL_VERSION,
    UNKNOWN_PAIR,
    check_request,
    is_pair_request,
    read_settings,
)
from helpers.fake_server import FakeVLLM

SERVER_FLAGS = {"plugin": "ctxleak-cid", "protocol": PROTOCOL_VERSION, "runner": "v1",
                "chunked_prefill": False, "max_num_batched_tokens": 8192, "max_num_seqs": 128,
                "async_scheduling": False, "pairing_scheduler": True, "max_model_len": 256}


class FakePluginVLLM(FakeVLLM):
    """``FakePluginVLLM(lm, faults=["late"], flags={...})``: see the module docstring."""

    def __init__(self, lm: Any, *, faults: list[str] | None = None,
                 flags: dict[str, Any] | None = None,
                 records: dict[str, dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(lm, **kwargs)
        self.faults = deque(faults or [])
        self.records: dict[str, dict[str, Any]] = {} if records is None else records
        self.book = PairBook(self.records.__setitem__, {**SERVER_FLAGS, **(flags or {})},
                             vocab=int(lm.model.config.vocab_size))
        self.pair_requests = 0

    def extra_get(self, path: str) -> tuple[int, Any] | None:
        if not path.startswith(PAIRS_PATH):
            return None
        got = self.records.pop(path[len(PAIRS_PATH):], None)
        if got is None:
            return 404, {"error": {"message": "no records", "type": UNKNOWN_PAIR}}
        return 200, got

    def completions(self, body: dict[str, Any], mode: str | None) -> dict[str, Any]:
        xargs = body.get("vllm_xargs")
        if not is_pair_request(xargs):
            return super().completions(body, mode)
        self.pair_requests += 1
        fault = self.faults.popleft() if self.faults else None
        settings = read_settings(dict(xargs))  # vLLM's admission: HTTP 400 naming the field
        check_request(settings, max_tokens=int(body["max_tokens"]), n=int(body.get("n", 1)))
        prompts = [list(map(int, p)) for p in body["prompt"]]
        both = range(len(prompts))
        limits = [int(body["max_tokens"])] * len(prompts)
        if fault == "short":
            limits[1] -= 1
        members = [self.book.admit(settings, limits[0], prompts[0]), None][:len(prompts)]
        outs: list[list[int]] = [[] for _ in both]
        live = [True for _ in both]
        stops = set(body.get("stop_token_ids") or [])
        step = 0
        while any(live):
            if len(prompts) > 1 and members[1] is None and (fault != "late" or step >= 1):
                members[1] = self.book.admit(settings, limits[1], prompts[1])
            if fault == "drop" and step == 2 and members[1] is not None and live[1]:
                self.book.leave(members[1])
                live[1] = False
            rows = [i for i in both if live[i] and members[i] is not None]
            for _ in range(2 if fault == "repeat" and step == 1 else 1):
                logits = torch.stack([self._raw(prompts[i] + outs[i]) for i in rows])
                self.book.apply(logits, [(r, members[i], len(outs[i]))
                                         for r, i in enumerate(rows)])
            for r, i in enumerate(rows):
                token = int(torch.argmax(logits[r]))
                outs[i].append(token)
                if token in stops or len(outs[i]) >= limits[i]:
                    live[i] = False
                    self.book.leave(members[i])
            step += 1
        if fault == "lie" and settings.pair in self.records:
            for rec in self.records[settings.pair]["steps"]:
                rec["logp_mix"] = 1.0
        return {"id": "cmpl-fake", "object": "text_completion", "model": body.get("model"),
                "choices": [{"index": i, "text": "", "token_ids": outs[i],
                             "finish_reason": "stop" if outs[i][-1:] and outs[i][-1] in stops
                             else "length"} for i in both]}

    def _raw(self, seq: list[int]) -> torch.Tensor:
        """The raw float32 next-token logits after ``seq``."""
        with self._lock, torch.no_grad():
            ids = torch.as_tensor([seq], dtype=torch.long)
            return self.lm.model(input_ids=ids).logits[0, -1].float().clone()
