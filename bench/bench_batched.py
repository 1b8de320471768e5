"""Across-examples benchmarks (issue 13, SPEC §8 "across examples"), default model, ratios
measured in the same run:

1. ``main``: the README's main job (``ctxleak influence --data demo --ngram 32``, 20 examples)
   end to end through the library, examples batched (``--batch-size auto``) against one example
   at a time (``--batch-size 1``), and against the reference workload of SPEC §8 (plain
   sampling, 2 streams x 50 tokens of a demo prompt; target: main job <= 20x of it, ~90 s).
2. ``cid``: CID generation of N examples in one batched KV cache, against the same N examples
   one at a time, and against Hugging Face's plain batched ``generate`` (pure sampling, 50
   tokens) of the N prompts with context and of the N prompts without it (CID decodes twice the
   streams: target <= 2.3x).
3. ``memory``: peak resident memory (above the loaded model) while measuring a batch of 16
   examples of the main job.

    python bench/bench_batched.py [--only main|cid|memory] [--limit 20] [--examples 16]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import torch
from _common import device_line, load_default, timed

import ctxleak
from ctxleak.engine.forward import left_pad, pad_id
from ctxleak.methods.influence.cid import generate_cid_many
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import (
    InfluenceOptions,
    Setting,
    example_parts,
    measure_examples,
)


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
    parts = example_parts(lm, load_examples("demo", task="auto")[0], Setting(1.0, 0.8),
                          InfluenceOptions())[0]
    hf_sample(lm, [parts.full] * 2, 2)  # warm-up
    t_ref, _ = timed(lambda: hf_sample(lm, [parts.full] * 2, 50), repeat=2)
    times = {}
    for size in ("auto", 1, "auto"):  # auto twice (before and after): load drift favours neither
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            ctxleak.influence(lm, "demo", ngram=32, limit=limit, batch_size=size, output=out,
                              progress=False)
            t = time.perf_counter() - t0
        times[size] = min(times.get(size, float("inf")), t)
    batched, single = times["auto"], times[1]
    return [f"| README main job, {limit} demo examples, --ngram 32 (measure + summary + report)"
            f" | {single:.1f} s | {batched:.1f} s | {single / batched:.2f}x | reference "
            f"(2 streams x 50 tokens) {t_ref:.2f} s: main job = {batched / t_ref:.1f}x of it "
            f"(target <= 20x, ~90 s) |"]


def cid(lm, n: int) -> list[str]:
    examples = load_examples("demo", task="auto")[:n]
    opts = InfluenceOptions(min_new_tokens=50)  # every response 50 tokens, as generate's
    setting = Setting(1.0, 0.8)
    parts = [example_parts(lm, ex, setting, opts)[0] for ex in examples]
    jobs = [(p.full, p.empty, opts.cid(setting), i) for i, p in enumerate(parts)]
    generate_cid_many(lm, jobs[:2])  # warm-up
    t_batch, batched = timed(lambda: generate_cid_many(lm, jobs))
    t_one, alone = timed(lambda: [generate_cid_many(lm, [j])[0] for j in jobs])
    same = [r.token_ids for r in batched] == [r.token_ids for r in alone]
    t_full, _ = timed(lambda: hf_sample(lm, [p.full for p in parts], 50))
    t_empty, _ = timed(lambda: hf_sample(lm, [p.empty for p in parts], 50))
    return [f"| CID generation, {n} examples x 50 tokens, batched vs one at a time (same tokens:"
            f" {same}) | {t_one:.1f} s | {t_batch:.1f} s | {t_one / t_batch:.2f}x | — |",
            f"| CID generation ({n} examples, 2 streams each) vs `generate` of the {n} prompts "
            f"with context | {t_full:.1f} s | {t_batch:.1f} s | CID / generate = "
            f"{t_batch / t_full:.2f}x | <= 2.3x |",
            f"| the same vs `generate` of the {n} prompts without context | {t_empty:.1f} s | "
            f"{t_batch:.1f} s | CID / generate = {t_batch / t_empty:.2f}x | <= 2.3x |"]


def memory(lm, n: int) -> list[str]:
    examples = load_examples("demo", task="auto")[:n]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jobs = [(ex, Setting(1.0, 0.8), i) for i, ex in enumerate(examples)]
    measure_examples(lm, jobs, InfluenceOptions(ngram=32))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return [f"| peak memory, {n} examples of the main job measured together | — | "
            f"+{peak - base:.0f} MiB over the loaded model ({peak:.0f} MiB resident) | — | — |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["main", "cid", "memory"], default=None)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--examples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_default()
    rows = []
    if args.only in (None, "memory"):  # first: the peak of the process so far is the model's
        rows += memory(lm, args.examples)
    if args.only in (None, "cid"):
        rows += cid(lm, args.examples)
    if args.only in (None, "main"):
        rows += main_job(lm, args.limit)
    print(f"# bench_batched on {device_line(lm)}")
    print("| benchmark | one at a time / reference | batched | ratio | target |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
