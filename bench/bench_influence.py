"""Context-influence benchmarks (SPEC §8), default model:

1. CID generation with two KV-cached streams against recomputing both prompts at every step
   (512-token context, 50 new tokens; target >= 10x).
2. n-gram influence with shared-prefix reuse against scoring every ablated context in full
   (512-token context, n = 8: 64 windows; target >= 1.6x and within 1.3x of the floor).

    python bench/bench_influence.py [--context 512] [--tokens 50] [--ngram 8] [--skip-naive-cid]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import device_line, load_default, long_context, throughput, timed

from ctxleak.methods.influence import CIDConfig, PromptParts, window_influence, windows
from ctxleak.mitigations.cid import _generate_many


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--ngram", type=int, default=8)
    ap.add_argument("--only", choices=["cid", "ngram"], default=None)
    args = ap.parse_args()
    lm = load_default()
    ctx = long_context(lm, args.context)
    parts = PromptParts(tuple(lm.bos_ids + lm.encode("Article: ")), tuple(ctx),
                        tuple(lm.encode(". Summary of the above news article:")))
    cfg = CIDConfig(lam=1.0, temperature=0.8, max_new_tokens=args.tokens,
                    min_new_tokens=args.tokens)
    _generate_many(lm, [(parts.full, parts.empty, CIDConfig(max_new_tokens=2, min_new_tokens=2), 0)])
    t_cached, [fast] = timed(lambda: _generate_many(lm, [(parts.full, parts.empty, cfg, 0)]))
    t_naive, same = float("nan"), None
    if args.only != "ngram":
        t_naive, [slow] = timed(lambda: _generate_many(lm, [(parts.full, parts.empty, cfg, 0)],
                                                       use_cache=False))
        same = fast.response_ids == slow.response_ids
    tps = throughput(lm)
    # floor of generation: both prompts once, then one position per stream per step
    gen_floor = (len(parts.full) + len(parts.empty) + 2 * args.tokens) / tps

    spans = windows(len(parts.context), args.ngram)
    response = fast.response_ids
    kw = dict(lam=1.0, temperature=0.8, min_new_tokens=args.tokens)
    t_full = t_reuse = err = float("nan")
    if args.only != "cid":
        # reuse first, then full, then reuse again (best of two): load drift favours neither
        t_reuse, b = timed(lambda: window_influence(lm, parts, response, spans,
                                                    reuse_prefix=True, **kw))
        t_full, a = timed(lambda: window_influence(lm, parts, response, spans,
                                                   reuse_prefix=False, **kw))
        t_reuse = min(t_reuse, timed(lambda: window_influence(lm, parts, response, spans,
                                                              reuse_prefix=True, **kw))[0])
        err = float(np.max(np.abs(a.logp_ablated - b.logp_ablated)))
    n_resp = len(response)
    full_positions = (len(parts.full) + n_resp) * (len(spans) + 1) + len(parts.empty) + n_resp
    needed = (len(parts.full) + n_resp + len(parts.empty) + n_resp
              + sum(len(parts.full) - (hi - lo) + n_resp - (len(parts.before) + lo)
                    for lo, hi in spans))
    floor = needed / tps

    print(f"# bench_influence on {device_line(lm)}")
    print(f"# context {len(parts.context)} tokens, prompt {len(parts.full)}, response "
          f"{n_resp} tokens; cached == uncached tokens: {same}; {len(spans)} windows of "
          f"{args.ngram}; max |Δ log p| reuse vs full = {err:.1e}; {tps:.0f} tok/s")
    print("| benchmark | naive (s) | ctxleak (s) | speed-up | floor (s) | ctxleak / floor |")
    print("|---|---|---|---|---|---|")
    print(f"| CID generation, {args.tokens} tokens, 2 streams | {t_naive:.1f} | {t_cached:.2f} | "
          f"{t_naive / t_cached:.1f}x | {gen_floor:.2f} | {t_cached / gen_floor:.2f}x |")
    print(f"| n-gram influence, n={args.ngram} ({len(spans)} windows) | {t_full:.1f} | "
          f"{t_reuse:.1f} | {t_full / t_reuse:.2f}x (tokens: {full_positions / needed:.2f}x) | "
          f"{floor:.1f} | {t_reuse / floor:.2f}x |")


if __name__ == "__main__":
    main()
