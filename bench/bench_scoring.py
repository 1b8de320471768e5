"""Engine benchmark (SPEC §8): score a continuation under 64 variants of a 512-token context,
each deleting a different 8-token window, with shared-prefix KV reuse against full
recomputation of every variant. Prints both ratios of SPEC §8: speed-up over the naive way and
distance from the floor (the token positions that must be computed, at one-large-batch speed).

    python bench/bench_scoring.py [--context 512] [--window 8] [--variants 64] [--continuation 32]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import device_line, load_default, long_context, throughput, timed

from ctxleak.engine.forward import common_prefix_length
from ctxleak.engine.scoring import continuation_logprobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--variants", type=int, default=64)
    ap.add_argument("--continuation", type=int, default=32)
    args = ap.parse_args()
    lm = load_default()
    ctx = long_context(lm, args.context)
    head = lm.bos_ids + lm.encode("Document: ")
    tail = lm.encode(". Summarise the document above.")
    cont = long_context(lm, args.context + args.continuation)[args.context:]
    full = head + ctx + tail
    starts = np.linspace(0, args.context - args.window, args.variants).astype(int)
    prompts = [full] + [head + ctx[:s] + ctx[s + args.window:] + tail for s in starts]

    continuation_logprobs(lm, prompts[:2], cont, reuse_prefix=False)  # warm-up
    t_naive, naive = timed(lambda: continuation_logprobs(lm, prompts, cont, reuse_prefix=False))
    t_reuse, reused = timed(lambda: continuation_logprobs(lm, prompts, cont, reuse_prefix=True))
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(naive, reused))

    total = sum(len(p) + len(cont) for p in prompts)
    needed = len(full) + len(cont) + sum(len(p) + len(cont) - min(common_prefix_length(p, full),
                                                                   len(p) - 1)
                                         for p in prompts[1:])
    tps = throughput(lm)
    floor = needed / tps
    print(f"# bench_scoring on {device_line(lm)}")
    print(f"# {len(prompts)} prompts of ~{len(full)} tokens + {len(cont)}-token continuation; "
          f"max |Δ log p| reuse vs full = {err:.2e}")
    print("| measurement | seconds | ratio |")
    print("|---|---|---|")
    print(f"| full recomputation (naive) | {t_naive:.2f} | 1.00 |")
    print(f"| prefix reuse (ctxleak) | {t_reuse:.2f} | {t_naive / t_reuse:.2f}x faster |")
    print(f"| token saving (theoretical) | | {total / needed:.2f}x |")
    print(f"| floor ({needed} positions at {tps:.0f} tok/s) | {floor:.2f} | ctxleak at "
          f"{t_reuse / floor:.2f}x the floor |")


if __name__ == "__main__":
    main()
