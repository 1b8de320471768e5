"""Bounded CID decoding in-process, its λ_t searches shared by the answers of a step (one
search of every answer's rows, ctxleak's way on a GPU) against each answer searching alone (the
way before, and ctxleak's way on a CPU), in one process, interleaved, best of ``--repeat``:
``cid._generate_many`` of ``--answers`` demo answers x ``--tokens`` new tokens in one batch
(bounded CID, ε = ``--eps`` per token, λ_max = 1, T = 0.8, every answer at its full length),
beside plain CID (λ = 0.5) and plain ``generate`` of the same prompts; ms per decoding step
(prefill included), and whether the shared and the lone searches gave the same ledgers.

    python bench/bench_bounded_decoding.py [--answers 16] [--tokens 50] [--eps 2] [--repeat 2]
    python bench/random_weights.py --model-dir DIR bench_bounded_decoding ...   (on a GPU)
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from _common import device_line, load_default, timed_rounds
from bench_batched import hf_sample

import ctxleak.mitigations.cid as cid
import ctxleak.mitigations.cid_steps as steps
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts


def compare(first, second) -> tuple[bool, int, float, float]:
    """(equal ledgers, answers with equal tokens, max |Δ λ_t| and |Δ log p̄| where equal)."""
    pairs = list(zip(first, second))
    agree = [(e, f) for x, y in pairs if x.response_ids == y.response_ids
             for e, f in zip(x.entries, y.entries)]
    return (first == second, sum(x.response_ids == y.response_ids for x, y in pairs),
            max((abs(e.lam - f.lam) for e, f in agree), default=0.0),
            max((abs(e.logp_context - f.logp_context) for e, f in agree), default=0.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--eps", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    lm = load_default()
    examples = load_examples("demo", task="auto")
    setting = Setting.cid(0.5, 0.8)
    parts = [example_parts(lm, examples[k % len(examples)], setting, InfluenceOptions())[0]
             for k in range(a.answers)]
    opts = InfluenceOptions(max_new_tokens=a.tokens, min_new_tokens=a.tokens)
    plain = opts.cid(setting)
    bounded = (replace(plain[0], lam=1.0, bounded_eps=a.eps), plain[1])
    jobs = {name: [(p.full, p.empty, config, k) for k, p in enumerate(parts)]
            for name, config in (("plain", plain), ("bounded", bounded))}
    prompts = [p.full for p in parts] + [p.empty for p in parts]
    shared_on = steps.SEARCH_TOGETHER_ON  # read by each step's shared search

    def bounded_with(devices):
        def run():
            steps.SEARCH_TOGETHER_ON = devices
            try:
                return cid._generate_many(lm, jobs["bounded"])
            finally:
                steps.SEARCH_TOGETHER_ON = shared_on
        return run

    here = frozenset({lm.device.type})
    cid._generate_many(lm, jobs["bounded"][:2])  # warm-up
    hf_sample(lm, prompts[:2], 2)
    got = timed_rounds({"shared": bounded_with(here), "alone": bounded_with(frozenset()),
                        "alone again": bounded_with(frozenset()),
                        "plain CID": lambda: cid._generate_many(lm, jobs["plain"]),
                        "generate": lambda: hf_sample(lm, prompts, a.tokens)}, repeat=a.repeat)
    ms = {k: 1e3 * t / a.tokens for k, (t, _) in got.items()}
    same, tokens, dlam, dlogp = compare(got["shared"][1], got["alone"][1])
    again = compare(got["alone"][1], got["alone again"][1])
    print(f"# two lone runs: same ledgers {again[0]}, same tokens {again[1]} of {a.answers}, "
          f"max |Δ λ_t| {again[2]:.1e}, |Δ log p̄| {again[3]:.1e}")
    print(f"# {device_line(lm)}, {lm.info.dtype}; {a.answers} answers ({2 * a.answers} rows) x "
          f"{a.tokens} tokens, bounded ε = {a.eps:g} per token, best of {a.repeat}")
    print("| bounded CID, λ_t searched together / alone | plain CID (λ = 0.5) | generate | "
          "together / alone | same ledgers | same tokens | max |Δ λ_t|, |Δ log p̄| |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {ms['shared']:.1f} / {ms['alone']:.1f} ms per step | {ms['plain CID']:.1f} ms | "
          f"{ms['generate']:.1f} ms | {ms['alone'] / ms['shared']:.2f}x | {same} | "
          f"{tokens} of {a.answers} | {dlam:.1e}, {dlogp:.1e} |")


if __name__ == "__main__":
    main()
