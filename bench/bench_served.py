"""Served-model benchmark, one run: the default model behind vLLM's OpenAI-compatible server.

The workload is the README main job's scoring (``ctxleak influence --data demo --ngram 32``):
teacher-forced log-probs of each demo example's answer (its reference, so both sides score the
same tokens) under the prompt with the context, without it, and without each 32-token window
of the context. It is timed

1. through the server with ctxleak's client (:class:`ctxleak.engine.served.ServedLM`: many
   requests in flight, several prompts per request) against in-process (ctxleak's engine,
   shared-prefix KV reuse);
2. with ctxleak's client against bare request loops in plain httpx on the same server: one
   prompt per request, sequentially (the simplest loop), and the server's bare throughput, the
   best of two simple concurrent batches (every prompt in flight at once, one per request; all
   prompts in one request). Target: the client keeps >= 90 % of the bare throughput.

vLLM skips its prefix cache for requests with ``prompt_logprobs``, so repeats cost the same and
the order of the measurements favours none; the served measurements run in interleaved rounds
(best of ``--repeat``), so a load that changes during the run weighs on each alike. Throughput
counts the token positions the server computes (prompt + answer of every sequence) per second.

    python bench/bench_served.py [--server-url URL --served-model NAME] [--limit 20]
        [--ngram 32] [--repeat 2] [--threads N]

Without ``--server-url`` a server is started on a free port (``<repo>/.venv-vllm``, made by
``scripts/setup.sh --dev``, or ``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py) and
stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os

import httpx
import numpy as np
import torch
from _common import device_line, load_default, timed, timed_rounds, vllm_server_for

from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.ngrams import windows
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts


def workload(lm, limit: int, ngram: int) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, answers) of the main job's scoring, each example's prompt with the context
    first (the prefix the others share)."""
    prompts, answers = [], []
    for ex in load_examples("demo", task="auto")[:limit]:
        parts = example_parts(lm, ex, Setting.cid(1.0, 1.0), InfluenceOptions(ngram=ngram))[0]
        answer = lm.encode(ex.reference)
        variants = [parts.full, parts.empty] + [
            parts.with_context(parts.context[:a] + parts.context[b:])
            for a, b in windows(len(parts.context), min(ngram, len(parts.context)))]
        prompts += variants
        answers += [answer] * len(variants)
    return prompts, answers


def body(name: str, seqs: list[list[int]]) -> dict:
    return {"model": name, "prompt": seqs, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0, "return_token_ids": True}


def bare_sequential(url: str, name: str, seqs: list[list[int]]) -> None:
    """One prompt per request, one request at a time."""
    with httpx.Client(timeout=600) as client:
        for s in seqs:
            client.post(f"{url}/v1/completions", json=body(name, [s])).raise_for_status()


def bare_concurrent(url: str, name: str, seqs: list[list[int]]) -> None:
    """Every prompt in flight at once, one per request."""
    async def run() -> None:
        limits = httpx.Limits(max_connections=len(seqs))
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            answers = await asyncio.gather(*[
                client.post(f"{url}/v1/completions", json=body(name, [s])) for s in seqs])
        for a in answers:
            a.raise_for_status()

    asyncio.run(run())


def bare_one_request(url: str, name: str, seqs: list[list[int]]) -> None:
    """All prompts in one request."""
    httpx.post(f"{url}/v1/completions", json=body(name, seqs), timeout=600).raise_for_status()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--ngram", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs of each measurement")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in-process")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_default()
    server, url, name = vllm_server_for(lm, args.server_url, args.served_model)
    try:
        served = serve("default", url, served_model=name)
        name = served.info.served_model
        prompts, answers = workload(lm, args.limit, args.ngram)
        seqs = [p + a for p, a in zip(prompts, answers)]
        positions = sum(len(s) for s in seqs)
        served.continuation_logprobs(prompts[:2], answers[:2])  # warm-up
        continuation_logprobs(lm, prompts[:2], answers[:2])
        r = args.repeat
        t_local, local = timed(lambda: continuation_logprobs(lm, prompts, answers), repeat=r)
        served_times = timed_rounds({  # interleaved: a changing load weighs on each alike
            "client": lambda: served.continuation_logprobs(prompts, answers),
            "sequential": lambda: bare_sequential(url, name, seqs),
            "concurrent": lambda: bare_concurrent(url, name, seqs),
            "one": lambda: bare_one_request(url, name, seqs)}, repeat=r)
        t_client, remote = served_times["client"]
        t_seq, t_conc, t_one = (served_times[k][0] for k in ("sequential", "concurrent", "one"))
        err = max(float(np.max(np.abs(a - b))) for a, b in zip(local, remote))
    finally:
        if server is not None:
            server.stop()
    t_bare = min(t_conc, t_one)
    bare_kind = "all prompts in flight, one per request" if t_conc <= t_one \
        else "all prompts in one request"
    opts = served.client.options
    load = os.getloadavg()[0]
    print(f"# bench_served on {device_line(lm)}; {datetime.date.today()}; load average "
          f"{load:.1f} at the end; server {served.info.server.get('version', '?')} at {url}")
    print(f"# {len(seqs)} sequences ({args.limit} demo examples x (with, without the context, "
          f"and each {args.ngram}-token window deleted)), {positions} token positions, "
          f"{sum(len(a) for a in answers)} answer tokens scored; max |Δ log p| served vs "
          f"in-process = {err:.1e} nats; best of {r}")
    print("| measurement | seconds | token positions/s | ratio |")
    print("|---|---|---|---|")
    print(f"| in-process (ctxleak engine, prefix reuse) | {t_local:.1f} | "
          f"{positions / t_local:.0f} | 1.00 |")
    print(f"| served, ctxleak client ({opts.max_in_flight} requests in flight, "
          f"{opts.prompts_per_request} prompts per request) | {t_client:.1f} | "
          f"{positions / t_client:.0f} | {t_local / t_client:.2f}x in-process speed |")
    print(f"| served, bare loop: one prompt per request, sequential (httpx) | {t_seq:.1f} | "
          f"{positions / t_seq:.0f} | client = {t_seq / t_client:.2f}x of it |")
    print(f"| served, bare: all prompts in flight, one per request (httpx, asyncio) | "
          f"{t_conc:.1f} | {positions / t_conc:.0f} | client = {t_conc / t_client:.2f}x of it |")
    print(f"| served, bare: all prompts in one request (httpx) | {t_one:.1f} | "
          f"{positions / t_one:.0f} | client = {t_one / t_client:.2f}x of it |")
    print(f"| client's share of the server's bare throughput (best: {bare_kind}) | | | "
          f"{100 * t_bare / t_client:.0f} % (target >= 90 %) |")


if __name__ == "__main__":
    main()
