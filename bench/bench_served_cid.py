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
   identical tokens, and where they agree the largest |Δ log p̄_λ| (nats) and |Δ λ_t|; the
   same for the first ``--whole-answers`` against the whole-distribution route (the same
   server's logits: what is left is the plugin's own error, not the two engines' float noise);
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
from functools import partial

from _common import device_line, load_default, timed_rounds, vllm_server_for

from ctxleak.engine.capabilities import CID_DECODING
from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
from ctxleak.mitigations.cid import CIDConfig, _generate_many


def jobs_for(lm, count: int, config: tuple) -> list:
    """(prompt with the context, prompt without it, config, seed) of ``count`` answers: the demo
    examples in order, again with other seeds once they run out."""
    examples = load_examples("demo", task="auto")
    out = []
    for k in range(count):
        parts = example_parts(lm, examples[k % len(examples)],
                              Setting.cid(config[0].lam, config[1].temperature), InfluenceOptions())[0]
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


def rates(models: dict, jobs: list, repeat: int) -> dict[str, float]:
    """Tokens per second of each model decoding ``jobs`` together (best of ``repeat``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the whole-distribution route says it is slow
        times = timed_rounds({k: partial(_generate_many, m, jobs) for k, m in models.items()},
                             repeat=repeat)
    return {k: sum(len(r.entries) for r in out) / t for k, (t, out) in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--answers", type=int, default=24, help="answers of the exactness check")
    ap.add_argument("--tokens", type=int, default=16, help="new tokens per answer")
    ap.add_argument("--concurrent", type=int, default=8, help="answers decoded together")
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs of each timing")
    ap.add_argument("--whole-answers", type=int, default=4,
                    help="answers also decoded by whole distributions, to compare")
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
            _generate_many(plugin, jobs[:1])  # warm-up (and the server's prefix cache)
            local, remote = _generate_many(lm, jobs), _generate_many(plugin, jobs)
            few = jobs[:args.whole_answers]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the whole-distribution route says it is slow
                slow = _generate_many(whole, few)
            exact.append((label, len(jobs), *agreement(local, remote), len(few),
                          *agreement(slow, remote[:len(few)])))
            alone.append((label, rates({"in-process": lm, "plugin": plugin, "whole": whole},
                                       jobs[:1], args.repeat)))
            together.append((label, rates({"in-process": lm, "plugin": plugin},
                                          jobs[:args.concurrent], args.repeat)))
    finally:
        if server is not None:
            server.stop()
    print(f"# bench_served_cid on {device_line(lm)}; {datetime.date.today()}; load average "
          f"{os.getloadavg()[0]:.1f} at the end; server {url}; {args.tokens} new tokens per "
          f"answer, timings best of {args.repeat}")
    print("| decoding | plugin against in-process: identical answers | max |Δ log p̄| | max "
          "|Δ λ_t| | plugin against whole distributions: identical answers | max |Δ log p̄| | "
          "max |Δ λ_t| |")
    print("|---|---|---|---|---|---|---|")
    for label, n, same, dlogp, dlam, m, same_w, dlogp_w, dlam_w in exact:
        print(f"| {label} | {same} of {n} ({100 * same / n:.0f} %) | {dlogp:.1e} nats | "
              f"{dlam:.1e} | {same_w} of {m} | {dlogp_w:.1e} nats | {dlam_w:.1e} |")
    print("| decoding | one answer: in-process tokens/s | plugin tokens/s | whole distributions "
          "tokens/s | plugin / in-process | whole / in-process |")
    print("|---|---|---|---|---|---|")
    for label, rate in alone:
        print(f"| {label} | {rate['in-process']:.1f} | {rate['plugin']:.1f} | "
              f"{rate['whole']:.2f} | {rate['plugin'] / rate['in-process']:.2f}x | "
              f"{rate['whole'] / rate['in-process']:.2f}x |")
    print(f"| decoding | {args.concurrent} answers together: in-process tokens/s | plugin "
          "tokens/s | plugin / in-process |")
    print("|---|---|---|---|")
    for label, rate in together:
        print(f"| {label} | {rate['in-process']:.1f} | {rate['plugin']:.1f} | "
              f"{rate['plugin'] / rate['in-process']:.2f}x |")

if __name__ == "__main__":
    main()
