"""Susceptibility benchmark (SPEC §8, paper 002 §5.2): seconds per query of Fisher
susceptibility (top-10, one forward pass + batched VJPs) against Monte Carlo susceptibility with
256 contexts (one next-token distribution per distinct context, batched, shared-prefix KV reuse),
on a few queries of the demo set with the default model; and batched VJPs against a loop over
the top-k.

    python bench/bench_susceptibility.py [--queries 4] [--contexts 256] [--naive-mc]

Contexts: exactly those ``ctxleak susceptibility`` scores with its defaults
(:func:`ctxleak.methods.susceptibility.query_contexts`, SPEC §6 / paper 002 §5.1): 256 draws
per query, 8 from the contexts that mention the queried entity and the rest from the relation's
contexts about its other entities, without replacement (each pool capped at its size),
seeded per query as the method seeds it. SPEC target: Fisher ≥ 50x faster than Monte Carlo
with 256 contexts (the paper: 70x on GPUs).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from _common import device_line, load_default, throughput, timed

from ctxleak.engine.forward import PrefixKV, common_prefix_length
from ctxleak.engine.generation import derive_seed
from ctxleak.methods.susceptibility import (
    SusceptibilityOptions,
    build_queries,
    fisher_susceptibility,
    load_relations,
    monte_carlo_susceptibility,
    query_contexts,
)
from ctxleak.methods.susceptibility.fisher import query_prompt
from ctxleak.methods.susceptibility.montecarlo import fitted_context_prompts


def measure(lm, text: str, texts: list[str], counts, k: int, naive: bool, store) -> dict:
    """Seconds of each way for one query (Fisher: best of 3; Monte Carlo: one run). Fisher uses
    one prefix store for all queries, as ``ctxleak susceptibility`` does."""

    def fisher_run(**kw):
        return lambda: fisher_susceptibility(lm, text, top_k=k, prefix_kv=store, **kw)

    t_mc, mc = timed(lambda: monte_carlo_susceptibility(lm, text, texts, counts))
    t_naive = None
    if naive:
        t_naive, _ = timed(lambda: monte_carlo_susceptibility(lm, text, texts, counts,
                                                              reuse_prefix=False))
    t_f, fr = timed(fisher_run(), repeat=3)
    t_loop, fl = timed(fisher_run(batched=False), repeat=3)
    t_whole, fw = timed(fisher_run(reuse_prefix=False), repeat=3)
    prompts, _ = fitted_context_prompts(lm, text, texts)
    needed = len(prompts[0]) + sum(len(p) - min(common_prefix_length(p, prompts[0]), len(p) - 1)
                                   for p in prompts[1:])
    return {"n": len(texts), "mc": t_mc, "naive": t_naive, "fisher": t_f, "loop": t_loop,
            "whole": t_whole, "chi_mc": mc.chi, "chi_f": fr.chi,
            "dchi": max(abs(fl.chi - fr.chi), abs(fw.chi - fr.chi)) / fr.chi,
            "needed": needed, "tokens": sum(len(p) for p in prompts),
            "before_query": query_prompt(lm, text).spans["query"][0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--contexts", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--naive-mc", action="store_true",
                    help="also time Monte Carlo without prefix reuse (slow)")
    ap.add_argument("--chat-template", default="auto", choices=["auto", "on", "off"],
                    help="the default model's chat template (auto: on)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--seed", type=int, default=0, help="the run seed (as --seed of the method)")
    args = ap.parse_args()
    # the method's defaults: the paper's mix (8 of 256 mention the entity), without replacement
    options = SusceptibilityOptions(n_contexts=args.contexts).validate()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.chat_template == "auto":
        lm = load_default()
    else:
        from ctxleak.engine.models import load_model

        lm = load_model("default", device="auto", chat_template=args.chat_template)
    rels = load_relations("demo")
    queries = build_queries(rels, ["closed", "open_qa", "open_completion"])[:args.queries]

    # warm-up (first-call allocations, lazy imports)
    monte_carlo_susceptibility(lm, queries[0].text, ["The capital of Peru is Lima.\n"] * 2)
    store = PrefixKV(lm)  # the tokens before every query (chat system turn), computed once
    fisher_susceptibility(lm, queries[0].text, top_k=args.top_k, prefix_kv=store)

    rows = []
    for q in queries:
        sample = query_contexts(q, rels, options.n_contexts,
                                np.random.default_rng(derive_seed(args.seed, q.index)),
                                scope=options.context_entities,
                                entity_contexts=options.entity_draws,
                                replace=options.sampling == "replacement").sample
        row = measure(lm, q.text, sample.texts, sample.counts, args.top_k, args.naive_mc,
                      store)
        rows.append({"id": q.id, **row})
        print(f"# {q.id}: {len(sample.texts)} distinct of {sample.n_draws} contexts, MC {row['mc']:.2f}s "
              f"(χ_MC={row['chi_mc']:.4f}), Fisher {row['fisher']:.3f}s (χ_F={row['chi_f']:.4g}), "
              f"loop {row['loop']:.3f}s, whole prompt {row['whole']:.3f}s", flush=True)

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in rows)

    tps = throughput(lm)
    floor = mean("needed") / tps
    print(f"# bench_susceptibility on {device_line(lm)}; chat template "
          f"{'on' if lm.use_chat_template else 'off'}; {len(rows)} queries; contexts: "
          f"{options.entity_draws} of {options.n_contexts} draws mention the entity "
          f"({options.context_entities}, {options.sampling}), {mean('n'):.0f} distinct; "
          f"max relative |Δχ_F| batched/loop/whole-prompt = {max(r['dchi'] for r in rows):.1e}")
    print("| measurement (seconds per query, mean) | ctxleak | naive way | ratio | target |")
    print("|---|---|---|---|---|")
    print(f"| Fisher χ_F (top-{args.top_k}) vs Monte Carlo χ_MC ({args.contexts} contexts, "
          f"prefix reuse) | {mean('fisher'):.3f} | {mean('mc'):.2f} | "
          f"{mean('mc') / mean('fisher'):.1f}x | ≥ 50x |")
    if args.naive_mc:
        print(f"| Fisher χ_F vs Monte Carlo χ_MC without prefix reuse | {mean('fisher'):.3f} | "
              f"{mean('naive'):.2f} | {mean('naive') / mean('fisher'):.1f}x | |")
    print(f"| Fisher: batched VJPs vs loop over the top-{args.top_k} | {mean('fisher'):.3f} | "
          f"{mean('loop'):.3f} | {mean('loop') / mean('fisher'):.2f}x | ~2x (SPEC §6) |")
    before = mean("before_query")
    note = f"{before:.0f} tokens before the query" if before else "no tokens before the query"
    print(f"| Fisher: prefix KV cache vs whole prompt in the graph ({note}) | "
          f"{mean('fisher'):.3f} | {mean('whole'):.3f} | {mean('whole') / mean('fisher'):.2f}x | |")
    print(f"| Monte Carlo vs floor ({mean('needed'):.0f} of {mean('tokens'):.0f} positions at "
          f"{tps:.0f} tok/s) | {mean('mc'):.2f} | {floor:.2f} | ctxleak at "
          f"{mean('mc') / floor:.2f}x the floor | |")


if __name__ == "__main__":
    main()
