"""Served Context Influence Decoding benchmark, one run: CID at λ = 0.5 (and bounded CID)
decoded through a vLLM server against the same decoding in-process, on the default model.

Served CID reads the whole next-token distribution of both streams (with and without the
context) at every step: one ``/v1/completions`` request per stream and step with
``logprobs = V`` and ``return_tokens_as_token_ids`` (every token's log-prob, keyed by id), sent
together for every live stream. The in-process side decodes the same jobs from the same seeds
in one batched KV cache. Printed: tokens/s of each, their ratio, whether the tokens agree and
the largest difference of the per-token mixture log-probs, and where a served step's time goes
(one whole-distribution request alone: its JSON size, the server's answer time, the client's
parse; against a plain one-token request).

    python bench/bench_served_cid.py [--server-url URL --served-model NAME] [--limit 4]
        [--tokens 16] [--repeat 2]

Without ``--server-url`` a server is started on a free port (``<repo>/.venv-vllm`` or
``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py) and stopped at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import httpx
from _common import device_line, load_default, timed_rounds, vllm_server_for

from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
from ctxleak.mitigations.cid import CIDConfig, generate_cid_many


def jobs_for(lm, limit: int, config: CIDConfig) -> list:
    """(prompt with the context, prompt without it, config, seed) of the first demo examples."""
    out = []
    for k, ex in enumerate(load_examples("demo", task="auto")[:limit]):
        parts = example_parts(lm, ex, Setting(config.lam, config.temperature),
                              InfluenceOptions())[0]
        out.append((parts.full, parts.empty, config, 1000 + k))
    return out


def one_request(url: str, name: str, prompt: list[int], logprobs: int) -> tuple[float, int, float]:
    """(seconds until the answer, its bytes, seconds to parse it) of one next-token request."""
    body = {"model": name, "prompt": [prompt], "max_tokens": 1, "temperature": 1.0,
            "logprobs": logprobs, "return_tokens_as_token_ids": True}
    t0 = time.perf_counter()
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
    t1 = time.perf_counter()
    answer.raise_for_status()
    json.loads(answer.content)
    return t1 - t0, len(answer.content), time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--limit", type=int, default=4, help="demo examples decoded together")
    ap.add_argument("--tokens", type=int, default=16, help="new tokens per answer")
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs of each measurement")
    args = ap.parse_args()
    lm = load_default()
    server, url, name = vllm_server_for(lm, args.server_url, args.served_model)
    try:
        served = serve("default", url, served_model=name)
        name = served.info.served_model
        rows = []
        for label, config in [
                ("CID λ = 0.5, T = 0.8", CIDConfig(lam=0.5, temperature=0.8,
                                                   max_new_tokens=args.tokens,
                                                   min_new_tokens=args.tokens)),
                ("bounded CID ε = 2 per token, T = 1", CIDConfig(
                    lam=1.0, temperature=1.0, bounded_eps=2.0, max_new_tokens=args.tokens,
                    min_new_tokens=args.tokens))]:
            jobs = jobs_for(lm, args.limit, config)
            generate_cid_many(served, jobs[:1])  # warm-up (and the server's prefix cache)
            times = timed_rounds({"local": lambda jobs=jobs: generate_cid_many(lm, jobs),
                                  "served": lambda jobs=jobs: generate_cid_many(served, jobs)},
                                 repeat=args.repeat)
            (t_local, local), (t_served, remote) = times["local"], times["served"]
            tokens = sum(len(r.entries) for r in local)
            same = all(a.response_ids == b.response_ids for a, b in zip(local, remote))
            err = max(abs(e.logp_context - f.logp_context) for a, b in zip(local, remote)
                      for e, f in zip(a.entries, b.entries))
            rows.append((label, tokens, t_local, t_served, same, err))
        prompt = jobs_for(lm, 1, CIDConfig())[0][0]
        full = min((one_request(url, name, prompt, served.vocab_size) for _ in range(3)),
                   key=lambda r: r[0])
        plain = min((one_request(url, name, prompt, 0) for _ in range(3)), key=lambda r: r[0])
    finally:
        if server is not None:
            server.stop()
    print(f"# bench_served_cid on {device_line(lm)}; {datetime.date.today()}; load average "
          f"{os.getloadavg()[0]:.1f} at the end; server {served.info.server.get('version', '?')}"
          f" at {url}; {args.limit} demo examples x {args.tokens} new tokens, best of "
          f"{args.repeat}")
    print("| decoding | tokens | in-process s | served s | in-process tokens/s | served "
          "tokens/s | served / in-process | same tokens | max |Δ log p̄| |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, tokens, t_local, t_served, same, err in rows:
        print(f"| {label} | {tokens} | {t_local:.1f} | {t_served:.1f} | {tokens / t_local:.1f}"
              f" | {tokens / t_served:.1f} | {t_local / t_served:.2f}x | {same} | "
              f"{err:.1e} nats |")
    print(f"# one step of one stream alone: whole distribution ({served.vocab_size} log-probs) "
          f"{full[0] * 1000:.0f} ms to answer, {full[1] / 1e6:.2f} MB of JSON, parsed in "
          f"{full[2] * 1000:.0f} ms; a plain one-token request {plain[0] * 1000:.0f} ms, "
          f"{plain[1] / 1e3:.1f} kB")
    print(f"# served CID sends 2 requests per answer token (with and without the context), "
          f"{2 * args.limit} in flight per step")


if __name__ == "__main__":
    main()
