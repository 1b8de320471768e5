"""Shared helpers for the benchmarks: the default model, a 512-token context, timing."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, TypeVar

import torch

from ctxleak.engine.forward import hidden_states, left_pad, pad_id
from ctxleak.run.records import demo_path


def load_default():
    from ctxleak.engine.models import load_model

    torch.manual_seed(0)
    return load_model("default", device="auto")


def datastore_questions(fact: str, limit: int):
    """The default model, the first ``limit`` questions of the bundled ``demo-datastore``
    whose ``fact`` is ``common`` or ``private`` (the ``short-answer`` chat prompt), and the
    datastore they retrieve from."""
    from ctxleak.engine.models import load_model
    from ctxleak.methods.influence.data import load_log
    from ctxleak.methods.influence.mechanism_mode import resolve_datastore
    from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages

    lm = load_model("default")
    examples, _ = load_log("demo-datastore",
                           app=AppPromptChoice(load_prompt_messages("short-answer")))
    store = resolve_datastore(None, "demo-datastore", examples)
    assert store is not None
    return lm, [ex for ex in examples if ex.fact == fact][:limit], store


def long_context(lm, n_tokens: int = 512) -> list[int]:
    """The first n tokens of the bundled demo contexts, joined."""
    texts = [json.loads(line)["context"] for line in open(demo_path("influence.jsonl"))]
    ids = lm.encode("\n\n".join(texts))
    if len(ids) < n_tokens:
        raise SystemExit(f"demo contexts give only {len(ids)} tokens")
    return ids[:n_tokens]


def _settled() -> None:
    """Wait for the GPU's queued work (if CUDA is in use), so that a clock reads finished work."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int = 1,
          clock: Callable[[], float] = time.perf_counter) -> tuple[float, T]:
    """Best time of ``repeat`` runs (seconds; wall time unless another ``clock`` is given, e.g.
    ``time.process_time`` for CPU seconds) and the last result. On a GPU the clock is read
    after its queued work has finished."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        _settled()
        t0 = clock()
        out = fn()
        _settled()
        best = min(best, clock() - t0)
    return best, out


def timed_rounds(fns: dict[str, Callable[[], Any]], repeat: int = 1,
                 clock: Callable[[], float] = time.perf_counter
                 ) -> dict[str, tuple[float, Any]]:
    """Best time of ``repeat`` runs of each function and its last result, the runs interleaved
    (round k runs every function once, in order) so that a load that changes slowly during the
    benchmark weighs on every measurement alike, not on whichever ran while it peaked."""
    best: dict[str, float] = {name: float("inf") for name in fns}
    out: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in fns.items():
            _settled()
            t0 = clock()
            out[name] = fn()
            _settled()
            best[name] = min(best[name], clock() - t0)
    return {name: (best[name], out[name]) for name in fns}


def throughput(lm, length: int = 512, batch: int = 4) -> float:
    """Token positions per second of one large batch forward pass (the floor's speed)."""
    seqs = [[(i * 7 + j) % 1000 + 100 for j in range(length)] for i in range(batch)]
    ids, mask, pos = left_pad(seqs, pad_id(lm), lm.device)

    def run():
        with torch.inference_mode():
            hidden_states(lm, ids, mask, pos)

    run()
    seconds, _ = timed(run, repeat=2)
    return batch * length / seconds


def device_line(lm) -> str:
    import platform

    dev = lm.info.device
    if dev.startswith("cuda"):
        dev += f" ({torch.cuda.get_device_name()})"
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {dev}"


def vllm_server_for(lm, url: str | None, name: str | None):
    """``(server, url, served name)``: the server at ``url`` when given (``server`` None), else
    a vLLM server started on the default model's folder on a free port (``<repo>/.venv-vllm``
    or ``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py), which the caller stops."""
    if url is not None:
        return None, url, name
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.vllm_server import SERVED_NAME, start_server, vllm_python

    python, why = vllm_python()
    if python is None:
        raise SystemExit(f"no vLLM server: {why}")
    # as docs/served-models.md starts it: a benchmark runs alone, so the model gets every core
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    t0 = time.perf_counter()
    server = start_server(str(lm.info.path), python)
    print(f"# vLLM server ready in {time.perf_counter() - t0:.0f} s ({server.url}, log "
          f"{server.log})")
    return server, server.url, SERVED_NAME
