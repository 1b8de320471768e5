"""Across-examples benchmarks (issue 13, SPEC §8 "across examples"), default model, ratios
measured in the same run:

1. ``main``: the README's main job (``ctxleak influence --data demo --ngram 32``, 20 examples)
   end to end through the library, examples batched (``--batch-size auto``) against one example
   at a time (``--batch-size 1``), and against the reference workload of SPEC §8 (plain
   sampling, 2 streams x 50 tokens of a demo prompt; target: main job <= 20x of it, ~90 s).
2. ``cid``: CID generation of N examples in one batched KV cache, against the same N examples
   one at a time, and against Hugging Face's plain batched ``generate`` (pure sampling, 50
   tokens) of the N prompts with context and of the N prompts without it (CID decodes twice the
   streams: target <= 2.3x; floor: generate with / without context), each split into prefill
   and per-step decode.
3. ``memory``: peak resident memory (above the loaded model) while measuring a batch of 16
   examples of the main job.
4. ``fisher``: Fisher susceptibility (top-10) against Monte Carlo with 256 contexts per query,
   both batched across queries (target >= 50x), and each batched against one query at a time.
5. ``icl``: ICLInf queries per second, several queries' prompts in one engine call against one
   query at a time.
6. ``prefill``: the main job with generation's full-prompt KV cache handed to the n-gram
   scoring against scoring that computes it again.

    python bench/bench_batched.py [--only main|prefill|cid|memory|fisher|icl] [--limit 20]
        [--examples 16]
        [--queries 8]
        [--threads 1] [--cpu-time]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import numpy as np
import torch
from _common import device_line, load_default, timed

import ctxleak
from ctxleak.engine.batching import BatchPolicy, shared_prefixes, using
from ctxleak.engine.forward import left_pad, pad_id
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import (
    InfluenceOptions,
    Job,
    Setting,
    example_parts,
    measure_examples,
)
from ctxleak.mitigations.cid import _generate_many


def hf_sample(lm, prompts, tokens: int, seed: int = 0) -> None:
    """Plain batched sampling with ``generate`` (no top-k/top-p), exactly ``tokens`` new tokens."""
    from transformers import GenerationConfig

    ids, mask, _ = left_pad(prompts, pad_id(lm), lm.device)
    config = GenerationConfig(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                              temperature=0.8, top_k=0, top_p=1.0, pad_token_id=pad_id(lm))
    torch.manual_seed(seed)
    with torch.inference_mode():
        lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


def main_job(lm, limit: int) -> list[str]:
    parts = example_parts(lm, load_examples("demo", task="auto")[0], Setting.cid(1.0, 0.8),
                          InfluenceOptions())[0]
    hf_sample(lm, [parts.full] * 2, 2)  # warm-up
    t_ref, _ = timed(lambda: hf_sample(lm, [parts.full] * 2, 50), repeat=2)
    times: dict[tuple[str | int, bool], float] = {}
    # auto before and after the others, so that load drift favours none; batch_invariant on
    # (the default: each example's floats from its own passes) and off (scoring passes shared
    # across examples, floats equal up to ~1e-5)
    runs: list[tuple[str | int, bool]] = [("auto", True), ("auto", False), (1, True),
                                          ("auto", False), ("auto", True)]
    for size, invariant in runs:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            ctxleak.influence(lm, "demo", ngram=32, limit=limit, batch_size=size, output=out,
                              progress=False, batch_invariant=invariant)
            t = time.perf_counter() - t0
        times[size, invariant] = min(times.get((size, invariant), float("inf")), t)
    batched, single, shared = times["auto", True], times[1, True], times["auto", False]
    return [f"| README main job, {limit} demo examples, --ngram 32 (measure + summary + report)"
            f" | {single:.1f} s | {batched:.1f} s | {single / batched:.2f}x | reference "
            f"(2 streams x 50 tokens) {t_ref:.2f} s: main job = {batched / t_ref:.1f}x of it "
            f"(target <= 20x, ~90 s) |",
            f"| README main job, batch-invariant (default) against --no-batch-invariant "
            f"(scoring shared across examples) | {shared:.1f} s | {batched:.1f} s | "
            f"{batched / shared:.2f}x | cost of byte-identical samples |"]


def prefill(lm, limit: int) -> list[str]:
    """The main job's measurement (batch-invariant, the default) with generation's full-prompt
    KV cache handed to the n-gram scoring against scoring that computes the prompt again (same
    records): ``measure_examples(..., hand_over_prefill=...)``, examples 8 at a time, inside
    ``shared_prefixes`` as every influence run scores (a fresh store each round)."""
    examples = load_examples("demo", task="auto")[:limit]
    options = InfluenceOptions(ngram=32)
    jobs = [Job(ex, Setting.cid(1.0, 0.8), k) for k, ex in enumerate(examples)]
    times: dict[bool, float] = {}
    with using(lm, BatchPolicy.of("auto", invariant=True, device=lm.device)):
        for hand_over in (True, False, True):
            t0 = time.perf_counter()
            with shared_prefixes():
                for start in range(0, len(jobs), 8):
                    measure_examples(lm, jobs[start:start + 8], options,
                                     hand_over_prefill=hand_over)
            t = time.perf_counter() - t0
            times[hand_over] = min(times.get(hand_over, float("inf")), t)
    return [f"| README main job's measurement ({limit} examples): full-prompt KV cache handed "
            f"from generation to n-gram scoring vs recomputed | {times[False]:.1f} s | "
            f"{times[True]:.1f} s | {times[False] / times[True]:.2f}x | — |"]


def cid(lm, n: int, clock=time.perf_counter) -> list[str]:
    """CID of ``n`` demo examples (50 tokens each) against Hugging Face's ``generate``. Each
    side is also run for 1 token (its prefill and first draw), so its time splits into prefill
    and decode, and the decode into a per-step time: CID's 2n rows against ``generate``'s n rows
    with context and its 2n rows of both prompt sets. The floor of CID / generate(no context) on
    a prefill-bound CPU is generate(with context) / generate(no context): CID must prefill the
    prompts with context, which ``generate`` of the prompts without it does not."""
    examples = load_examples("demo", task="auto")[:n]
    setting = Setting.cid(1.0, 0.8)
    parts = [example_parts(lm, ex, setting, InfluenceOptions())[0] for ex in examples]

    def jobs(tokens: int):
        opts = InfluenceOptions(max_new_tokens=tokens, min_new_tokens=tokens)  # as generate's
        return [(p.full, p.empty, opts.cid(setting), i) for i, p in enumerate(parts)]

    def t(fn):
        return timed(fn, clock=clock)

    full, empty = [p.full for p in parts], [p.empty for p in parts]
    _generate_many(lm, jobs(2)[:2])  # warm-up
    t_batch, batched = t(lambda: _generate_many(lm, jobs(50)))
    t_one, alone = t(lambda: [_generate_many(lm, [j])[0] for j in jobs(50)])
    same = [r.response_ids for r in batched] == [r.response_ids for r in alone]
    t_cid1, _ = t(lambda: _generate_many(lm, jobs(1)))
    t_full, _ = t(lambda: hf_sample(lm, full, 50))
    t_full1, _ = t(lambda: hf_sample(lm, full, 1))
    t_empty, _ = t(lambda: hf_sample(lm, empty, 50))
    t_empty1, _ = t(lambda: hf_sample(lm, empty, 1))
    t_both, _ = t(lambda: hf_sample(lm, full + empty, 50))
    t_both1, _ = t(lambda: hf_sample(lm, full + empty, 1))

    def step(total, first):  # decode time per step after the prefill and first draw, in ms
        return 1000 * (total - first) / 49

    unit = "CPU s" if clock is time.process_time else "s"
    return [f"| CID generation, {n} examples x 50 tokens, batched vs one at a time (same tokens:"
            f" {same}) | {t_one:.1f} {unit} | {t_batch:.1f} {unit} | {t_one / t_batch:.2f}x "
            f"| — |",
            f"| CID generation ({n} examples, 2 streams each) vs `generate` of the {n} prompts "
            f"with context | {t_full:.1f} {unit} | {t_batch:.1f} {unit} | CID / generate = "
            f"{t_batch / t_full:.2f}x | — |",
            f"| the same vs `generate` of the {n} prompts without context (the issue's target; "
            f"floor: generate with / without context = {t_full / t_empty:.2f}x) | "
            f"{t_empty:.1f} {unit} | {t_batch:.1f} {unit} | CID / generate = "
            f"{t_batch / t_empty:.2f}x | <= 2.3x |",
            f"| prefill + first token: CID ({2 * n} rows) vs `generate` with context + "
            f"`generate` without | {t_full1:.1f} + {t_empty1:.1f} {unit} | {t_cid1:.1f} {unit} | "
            f"{t_cid1 / (t_full1 + t_empty1):.2f}x | — |",
            f"| decode per step: CID ({2 * n} rows) vs `generate` of the {n} prompts with "
            f"context ({n} rows) / of both prompt sets ({2 * n} rows) | "
            f"{step(t_full, t_full1):.0f} / {step(t_both, t_both1):.0f} ms | "
            f"{step(t_batch, t_cid1):.0f} ms | {step(t_batch, t_cid1) / step(t_full, t_full1):.2f}x"
            f" / {step(t_batch, t_cid1) / step(t_both, t_both1):.2f}x | — |"]


def memory(lm, n: int) -> list[str]:
    examples = load_examples("demo", task="auto")[:n]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jobs = [Job(ex, Setting.cid(1.0, 0.8), i) for i, ex in enumerate(examples)]
    measure_examples(lm, jobs, InfluenceOptions(ngram=32))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return [f"| peak memory, {n} examples of the main job measured together | — | "
            f"+{peak - base:.0f} MiB over the loaded model ({peak:.0f} MiB resident) | — | — |"]


def fisher_mc(lm, n_queries: int, n_contexts: int = 256) -> list[str]:
    """Fisher (top-10) against Monte Carlo with 256 distinct contexts per query, both batched
    across ``n_queries`` queries, and each against itself one query at a time."""
    from ctxleak.engine.forward import PrefixKV
    from ctxleak.methods.susceptibility import (
        build_queries,
        context_pool,
        fisher_susceptibility,
        load_relations,
        pool_entities,
        sample_contexts,
    )
    from ctxleak.methods.susceptibility.fisher import fisher_susceptibility_many
    from ctxleak.methods.susceptibility.montecarlo import monte_carlo_many

    rels = load_relations("demo")
    queries = build_queries(rels, ["closed", "open_qa", "open_completion"])[:n_queries]
    jobs = []
    for i, q in enumerate(queries):
        rel = next(r for r in rels if r.name == q.relation)
        sample = sample_contexts(context_pool(rel, pool_entities(q, rels, "all")), n_contexts,
                                 np.random.default_rng(i), replace=False)
        jobs.append((q.text, sample.texts, sample.counts))
    texts = [q.text for q in queries]
    store = PrefixKV(lm)
    fisher_susceptibility_many(lm, texts[:2], prefix_kv=store)  # warm-up
    t_fb, fb = timed(lambda: fisher_susceptibility_many(lm, texts, prefix_kv=store), repeat=3)
    t_f1, f1 = timed(lambda: [fisher_susceptibility(lm, t, prefix_kv=store) for t in texts],
                     repeat=3)
    t_mb, _ = timed(lambda: monte_carlo_many(lm, jobs))
    t_m1, _ = timed(lambda: [monte_carlo_many(lm, [j])[0] for j in jobs])
    dchi = max(abs(a.chi - b.chi) / b.chi for a, b in zip(fb, f1))
    n = len(queries)
    return [f"| Fisher (top-10), {n} queries batched vs one at a time (max rel. Δχ_F "
            f"{dchi:.0e}) | {t_f1 / n:.3f} s/query | {t_fb / n:.3f} s/query | "
            f"{t_f1 / t_fb:.2f}x | — |",
            f"| Monte Carlo ({n_contexts} contexts), {n} queries batched vs one at a time | "
            f"{t_m1 / n:.2f} s/query | {t_mb / n:.2f} s/query | {t_m1 / t_mb:.2f}x | — |",
            f"| Fisher vs Monte Carlo-{n_contexts}, both batched across {n} queries | "
            f"MC {t_mb / n:.2f} s/query | Fisher {t_fb / n:.3f} s/query | "
            f"{t_mb / t_fb:.1f}x | >= 50x |"]


def icl(lm, n_queries: int, shots: int = 4) -> list[str]:
    """ICLInf queries per second: several queries' full and leave-one-out prompts in one engine
    call against one query at a time (demo task, prefix reuse on both sides)."""
    from ctxleak.methods.icl import (
        ICLConfig,
        LabelScorer,
        PromptBuilder,
        draw_exemplars,
        load_task,
        query_prompts,
    )
    from ctxleak.methods.icl.pipeline import score_prompts_many

    chat, lm.use_chat_template = lm.use_chat_template, False  # the CLI's default for icl
    task = load_task("demo")
    config = ICLConfig(calibration=(False,))
    builder = PromptBuilder(lm, task.fmt, task.labels)
    scorer = LabelScorer(lm, task.labels)
    qps = []
    for j in range(n_queries):
        picked = draw_exemplars(len(task.train), shots, 0, j)
        qps.append(query_prompts(builder, [(i, task.train[i].text, task.train[i].label)
                                           for i in picked], task.test[j].text))
    score_prompts_many(scorer, qps[:1], config)  # warm-up
    t_one, one = timed(lambda: [score_prompts_many(scorer, [q], config)[0] for q in qps],
                       repeat=2)
    t_many, many = timed(lambda: score_prompts_many(scorer, qps, config), repeat=2)
    err = max(float(np.max(np.abs(a.labels - b.labels))) for a, b in zip(one, many))
    lm.use_chat_template = chat
    return [f"| ICLInf, {shots} shots, {n_queries} queries: queries/s batched vs one at a time "
            f"(max |Δ log p| {err:.0e}) | {n_queries / t_one:.2f} q/s | "
            f"{n_queries / t_many:.2f} q/s | {t_one / t_many:.2f}x | — |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["main", "prefill", "cid", "memory", "fisher", "icl"],
                    default=None)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--examples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cpu-time", action="store_true",
                    help="cid: CPU seconds of this process (with --threads 1 on a shared "
                         "machine, less sensitive to other processes than wall time)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_default()
    print(f"# bench_batched on {device_line(lm)}")
    print("| benchmark | one at a time / reference | batched | ratio | target |")
    print("|---|---|---|---|---|", flush=True)
    sections = [("memory", lambda: memory(lm, args.examples)),  # first: the model's own peak
                ("cid", lambda: cid(lm, args.examples,
                                        time.process_time if args.cpu_time else time.perf_counter)),
                ("fisher", lambda: fisher_mc(lm, args.queries)),
                ("icl", lambda: icl(lm, args.queries)),
                ("main", lambda: main_job(lm, args.limit)),
                ("prefill", lambda: prefill(lm, args.limit))]
    for name, run in sections:
        if args.only in (None, name):
            print("\n".join(run()), flush=True)

if __name__ == "__main__":
    main()
