"""Benchmark: the cost of the data-dependent accounting of the DP synthetic-text audit (SPEC §8).

Target: the leave-one-out divergences cost at most 20% on top of the mechanism's own generation
(Algorithm 1 of paper 001, s KV-cached streams). For each subset size s it generates the same
sequences (same private subsets, same seeds) with ``observe=None`` and with the divergence
``observe``, alternating the order, and prints the end-to-end overhead and the time spent inside
``observe``. It also times the naive way to get the same numbers, re-running the mechanism on
each remove-one neighbour D∖{p} by a forward pass of the other s−1 prompts at every step
(measured at the first step for one neighbour and multiplied by s: the full measurement would
take minutes per token). Last, the mechanism with the prompts' shared prefix (the instruction,
the chat template's system turn) prefilled once against prefilling every stream whole.

    python bench/bench_audit.py [--subset-sizes 8,16] [--max-tokens 24] [--n-seq 2]
                                [--threads N] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import torch

from ctxleak.engine.generation import generate_streams
from ctxleak.engine.local.prefill import shared_prefix_length
from ctxleak.engine.models import load_model
from ctxleak.methods.audit import (
    DPAggregator,
    draw_subset,
    load_private_data,
    sequence_seeds,
    subset_prompts,
)
from ctxleak.mitigations.accounting import calibrate
from ctxleak.mitigations.dp_synthetic import aggregate, clip_logits, sampling_logprobs


class TimedAggregator(DPAggregator):
    """The audit's aggregator, timing its ``observe`` (the leave-one-out divergences)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.observe_seconds = 0.0

    def observe(self, logits, logprobs, token, step):
        t0 = time.perf_counter()
        out = super().observe(logits, logprobs, token, step)
        self.observe_seconds += time.perf_counter() - t0
        return out


def run_once(lm, prompts, clip, tau, alpha, max_tokens, seed, share_prefix=True):
    agg = TimedAggregator(clip, tau, alpha)
    t0 = time.perf_counter()
    gen = generate_streams(lm, prompts, agg.combine,
                           observe=agg.observe if alpha is not None else None,
                           max_new_tokens=max_tokens, seed=seed, share_prefix=share_prefix)
    return time.perf_counter() - t0, agg.observe_seconds, gen


def naive_neighbour_step(lm, prompts, clip, tau):
    """One remove-one neighbour at step 0 the naive way: forward the other s−1 prompts from
    scratch, clip, average, softmax (what a from-scratch audit repeats s times per token)."""
    from ctxleak.engine.forward import head_logits, hidden_states, left_pad, pad_id

    t0 = time.perf_counter()
    with torch.inference_mode():
        ids, mask, pos = left_pad(prompts[1:], pad_id(lm), lm.device)
        hidden, _ = hidden_states(lm, ids, mask, pos)
        rows = clip_logits(head_logits(lm, hidden[:, -1]).double(), clip)
        sampling_logprobs(aggregate(rows), tau)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset-sizes", default="8,16")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--n-seq", type=int, default=2)
    parser.add_argument("--target-eps", type=float, default=10.0)
    parser.add_argument("--clip", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each variant per sequence; the fastest counts")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_model("default", device=args.device)
    examples = load_private_data("demo", label="all")
    print(f"model {lm.info.name} on {lm.info.device}, torch threads {torch.get_num_threads()}, "
          f"T_max {args.max_tokens}, {args.n_seq} sequences per s, target ε {args.target_eps:g}")
    rows, prefix_rows = [], []
    for s in [int(x) for x in args.subset_sizes.split(",")]:
        cal = calibrate(args.target_eps, 1e-5, clip=args.clip, subset_size=s, temperature=2.0,
                        n_gen=args.n_seq, max_tokens=args.max_tokens)
        plain = tracked = inside = unshared = 0.0
        shared_len = 0
        tokens = 0
        naive_token: float | None = None
        for i in range(args.n_seq):
            subset_seed, gen_seed = sequence_seeds(args.seed, i)
            prompts, _ = subset_prompts(lm, examples, draw_subset(len(examples), s, subset_seed),
                                        label="all")
            order = (None, cal.alpha) if i % 2 == 0 else (cal.alpha, None)
            drawn = []
            for alpha in order:
                runs = [run_once(lm, prompts, cal.clip, cal.temperature, alpha, args.max_tokens,
                                 gen_seed) for _ in range(args.repeats)]
                dt, obs, gen = min(runs, key=lambda r: r[0])
                drawn.append(gen.token_ids)
                if alpha is None:
                    plain += dt
                else:
                    tracked += dt
                    inside += obs
                    tokens += len(gen.records)
            assert drawn[0] == drawn[1], "observing changed the draws"
            dt, _, gen = min((run_once(lm, prompts, cal.clip, cal.temperature, None,
                                       args.max_tokens, gen_seed, share_prefix=False)
                              for _ in range(args.repeats)), key=lambda r: r[0])
            assert gen.token_ids == drawn[0], "prefilling the shared prefix changed the draws"
            unshared += dt
            shared_len = shared_prefix_length(prompts)
            if naive_token is None:
                naive_token = s * naive_neighbour_step(lm, prompts, cal.clip, cal.temperature)
        per_token_ours = inside / max(tokens, 1)
        rows.append((s, tokens, plain, tracked, tracked / plain - 1, inside / plain,
                     per_token_ours, naive_token))
        prefix_rows.append((s, shared_len, plain, unshared))
    print()
    print("| benchmark | s | tokens | mechanism only (s) | + divergences (s) | overhead "
          "end-to-end | time in observe / mechanism | LOO per token: ctxleak | naive (s x "
          "neighbour forward) | naive / ctxleak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s, tokens, plain, tracked, over, share, ours, naive in rows:
        assert naive is not None  # set at the first setting of each s
        print(f"| DP audit, leave-one-out RDP ({lm.info.device}) | {s} | {tokens} | {plain:.2f} | "
              f"{tracked:.2f} | {100 * over:+.1f}% | {100 * share:.1f}% | {1e3 * ours:.1f} ms | "
              f"{naive:.2f} s | {naive / ours:.0f}x |")
    print()
    print("| benchmark | s | shared prefix tokens | mechanism, prefix once (s) | prefix per stream "
          "(s) | ratio |")
    print("|---|---|---|---|---|---|")
    for s, n, once, each in prefix_rows:
        print(f"| DP audit generation, shared prefix prefilled once | {s} | {n} | {once:.2f} | "
              f"{each:.2f} | {each / once:.2f}x |")


if __name__ == "__main__":
    main()
