"""Served Context Influence Decoding benchmark, one run: CID at λ = 0.5, T = 0.8 and bounded CID
(ε = 2 per token) on the default model, decoded three ways on the same jobs and seeds:

- **in-process**: ctxleak's own loop, every answer's two streams in one batched KV cache;
- **plugin**: inside the vLLM server by ctxleak's logits processor (one completions request per
  answer with both prompts; the records from ``/v1/ctxleak/pairs/{id}``);
- **whole distributions**: the route without the plugin, one request per stream and step
  carrying every token's log-prob.

Printed, as Markdown rows for docs/served-models.md:

1. exactness: ``--answers`` answers (the demo examples, then again with other seeds) ×
   ``--tokens`` tokens through the plugin against in-process: the share of answers with
   identical tokens, and where they agree the largest |Δ log p̄_λ| (nats) and |Δ λ_t|;
2. one answer alone: tokens/s of each way, and their ratios;
3. ``--concurrent`` answers together: tokens/s of in-process and plugin, and the ratio.

    python bench/bench_served_cid.py [--server-url URL --served-model NAME] [--answers 24]
        [--tokens 16] [--concurrent 8] [--repeat 2]

Without ``--server-url`` a server is started with the plugin on a free port
(``<repo>/.venv-vllm`` or ``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py) and stopped at
the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import warnings
from dataclasses import replace

from _common import device_line, load_default, timed_rounds, vllm_server_for

from ctxleak.engine.capabilities import CID_DECODING
from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
from ctxleak.mitigations.cid import CIDConfig, generate_cid_many


def jobs_for(lm, count: int, config: CIDConfig) -> list:
    """(prompt with the context, prompt without it, config, seed) of ``count`` answers: the demo
    examples in order, again with other seeds once they run out."""
    examples = load_examples("demo", task="auto")
    out = []
    for k in range(count):
        parts = example_parts(lm, examples[k % len(examples)],
                              Setting(config.lam, config.temperature), InfluenceOptions())[0]
        out.append((parts.full, parts.empty, config, 1000 + k))
    return out


def agreement(local, remote) -> tuple[int, float, float]:
    """(answers with identical tokens, max |Δ log p̄| and max |Δ λ_t| over those answers)."""
    same = [(a, b) for a, b in zip(local, remote) if a.response_ids == b.response_ids]
    dlogp = max((abs(e.logp_context - f.logp_context) for a, b in same
                 for e, f in zip(a.entries, b.entries)), default=0.0)
    dlam = max((abs(e.lam - f.lam) for a, b in same for e, f in zip(a.entries, b.entries)),
               default=0.0)
    return len(same), dlogp, dlam


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--answers", type=int, default=24, help="answers of the exactness check")
    ap.add_argument("--tokens", type=int, default=16, help="new tokens per answer")
    ap.add_argument("--concurrent", type=int, default=8, help="answers decoded together")
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs of each timing")
    args = ap.parse_args()
    lm = load_default()
    server, url, name = vllm_server_for(lm, args.server_url, args.served_model)
    exact, alone, together = [], [], []
    try:
        plugin = serve("default", url, served_model=name)
        if CID_DECODING not in plugin.capabilities:
            raise SystemExit(f"the server at {url} has no ctxleak CID plugin")
        whole = replace(plugin, capabilities=plugin.capabilities - {CID_DECODING})
        for label, config in [
                ("CID λ = 0.5, T = 0.8", CIDConfig(lam=0.5, temperature=0.8,
                                                   max_new_tokens=args.tokens,
                                                   min_new_tokens=args.tokens)),
                ("bounded CID ε = 2 per token, T = 0.8", CIDConfig(
                    lam=1.0, temperature=0.8, bounded_eps=2.0, max_new_tokens=args.tokens,
                    min_new_tokens=args.tokens))]:
            jobs = jobs_for(lm, args.answers, config)
            generate_cid_many(plugin, jobs[:1])  # warm-up (and the server's prefix cache)
            local, remote = generate_cid_many(lm, jobs), generate_cid_many(plugin, jobs)
            exact.append((label, len(jobs), *agreement(local, remote)))
            one = jobs[:1]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the whole-distribution route says it is slow
                times = timed_rounds({"in-process": lambda: generate_cid_many(lm, one),
                                      "plugin": lambda: generate_cid_many(plugin, one),
                                      "whole": lambda: generate_cid_many(whole, one)},
                                     repeat=args.repeat)
            alone.append((label, {k: (t, sum(len(r.entries) for r in out))
                                  for k, (t, out) in times.items()}))
            many = jobs[:args.concurrent]
            times = timed_rounds({"in-process": lambda: generate_cid_many(lm, many),
                                  "plugin": lambda: generate_cid_many(plugin, many)},
                                 repeat=args.repeat)
            together.append((label, {k: (t, sum(len(r.entries) for r in out))
                                     for k, (t, out) in times.items()}))
    finally:
        if server is not None:
            server.stop()
    print(f"# bench_served_cid on {device_line(lm)}; {datetime.date.today()}; load average "
          f"{os.getloadavg()[0]:.1f} at the end; server {url}; {args.tokens} new tokens per "
          f"answer, timings best of {args.repeat}")
    print("| decoding | answers | identical tokens | max |Δ log p̄| where identical | "
          "max |Δ λ_t| where identical |")
    print("|---|---|---|---|---|")
    for label, n, same, dlogp, dlam in exact:
        print(f"| {label} | {n} | {same} ({100 * same / n:.0f} %) | {dlogp:.1e} nats | "
              f"{dlam:.1e} |")
    print("| decoding | one answer: in-process tokens/s | plugin tokens/s | whole distributions "
          "tokens/s | plugin / in-process | whole / in-process |")
    print("|---|---|---|---|---|---|")
    for label, t in alone:
        rate = {k: n / s for k, (s, n) in t.items()}
        print(f"| {label} | {rate['in-process']:.1f} | {rate['plugin']:.1f} | "
              f"{rate['whole']:.2f} | {rate['plugin'] / rate['in-process']:.2f}x | "
              f"{rate['whole'] / rate['in-process']:.2f}x |")
    print(f"| decoding | {args.concurrent} answers together: in-process tokens/s | plugin "
          "tokens/s | plugin / in-process |")
    print("|---|---|---|---|")
    for label, t in together:
        rate = {k: n / s for k, (s, n) in t.items()}
        print(f"| {label} | {rate['in-process']:.1f} | {rate['plugin']:.1f} | "
              f"{rate['plugin'] / rate['in-process']:.2f}x |")


if __name__ == "__main__":
    main()
