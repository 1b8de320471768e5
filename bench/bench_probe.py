"""PII probing benchmark (SPEC §8 style): the black-box probe of ``ctxleak probe`` against the
naive way, on the default model.

- scoring: target and null PII log-likelihoods of every prompt with the engine's batched
  ``continuation_logprobs`` (only the answer positions go through the LM head) against one
  plain Hugging Face forward pass per (prompt, answer) with full-vocabulary logits;
- generation: beam search (beam 2) over left-padded batches against one prompt at a time.

    python bench/bench_probe.py [--subjects 4] [--pii phone]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _common import device_line, load_default, timed

from ctxleak.methods.pii.probe import (
    ProbeOptions,
    beam_generate,
    encode_item,
    make_items,
    score_items,
)
from ctxleak.methods.pii.synth import synth_records
from ctxleak.methods.pii.templates import MAX_NEW_TOKENS


def naive_scores(lm, encoded) -> list[float]:
    out = []
    for enc in encoded:
        for cont in (enc.target, enc.null):
            ids = torch.tensor([list(enc.prompt) + list(cont)], device=lm.device)
            with torch.inference_mode():
                logp = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), dim=-1)
            n = len(enc.prompt)
            out.append(float(sum(logp[n - 1 + r, t] for r, t in enumerate(cont))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", type=int, default=4)
    ap.add_argument("--pii", default="phone")
    args = ap.parse_args()
    lm = load_default()
    items, _ = make_items(synth_records(args.subjects, 0), [args.pii], seed=0)
    encoded = [encode_item(lm, it) for it in items]
    max_new = MAX_NEW_TOKENS[args.pii]

    score_items(lm, encoded[:2])  # warm-up
    t_naive, naive = timed(lambda: naive_scores(lm, encoded))
    t_fast, fast = timed(lambda: score_items(lm, encoded))
    ours = [v for row in fast for v in (row["target_ll"], row["null_ll"])]
    err = float(np.max(np.abs(np.array(ours) - np.array(naive))))

    prompts = [e.prompt for e in encoded]
    t_one, one = timed(lambda: [beam_generate(lm, [p], max_new_tokens=max_new)[0]
                                for p in prompts])
    t_batch, batch = timed(lambda: beam_generate(lm, prompts, max_new_tokens=max_new))
    same = sum(a == b for a, b in zip(one, batch))

    print(f"device: {device_line(lm)}; {len(items)} {args.pii} prompts "
          f"({args.subjects} subjects x twins), beam {ProbeOptions().beam}")
    print("| probe step | naive (s) | ctxleak (s) | speed-up | check |")
    print("|---|---|---|---|---|")
    print(f"| target + null log-likelihood | {t_naive:.2f} | {t_fast:.2f} | "
          f"{t_naive / t_fast:.1f}x | max abs diff {err:.1e} |")
    print(f"| beam-2 generation, {max_new} tokens | {t_one:.2f} | {t_batch:.2f} | "
          f"{t_one / t_batch:.1f}x | {same}/{len(prompts)} identical |")


if __name__ == "__main__":
    main()
