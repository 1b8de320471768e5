"""Does ``demo-qa-large`` need its documents? Greedy answers of the default model with the four
documents of each question (λ = 1) and from the same prompt without them (λ = 0).

An answer is right when the SQuAD-normalised reference appears in it as whole words; token F1
and exact match as the frontier reads them (:mod:`ctxleak.methods.tradeoff.utility`).

Measured on a 2-core CPU (2026-11-26, the whole set, 32 tokens, under load from other jobs:
28 minutes): 0 of 148 right without the documents (mean token F1 0.009), 9 of 148 with them
(F1 0.017). The 135M default model mostly repeats the first document under the bundled QA
template, so the set separates the mechanisms better on a larger model.

    python bench/bench_demo_qa_large.py [--limit N] [--model default] [--tokens 32]
"""

from __future__ import annotations

import argparse
from collections import Counter

from ctxleak.engine.models import load_model
from ctxleak.methods.influence.data import load_examples, prompt_parts
from ctxleak.methods.tradeoff.utility import exact_match, normalize_answer, token_f1
from ctxleak.mitigations.cid import CIDConfig, _generate_many


def right(answer: str, reference: str) -> bool:
    """The reference, SQuAD-normalised, appears in the normalised answer as whole words."""
    return f" {normalize_answer(reference)} " in f" {normalize_answer(answer)} "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="the first N questions only")
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer")
    args = parser.parse_args()
    lm = load_model(args.model)
    examples = load_examples("demo-qa-large")[:args.limit]
    parts = [prompt_parts(lm, ex, reserve=args.tokens)[0] for ex in examples]
    refs = [ex.reference or "" for ex in examples]
    n = len(examples)
    for lam, label in ((0.0, "without the documents"), (1.0, "with the documents")):
        cfg = CIDConfig(lam=lam, max_new_tokens=args.tokens, min_new_tokens=0)
        jobs = [(p.full if lam else p.empty, p.empty, cfg, k) for k, p in enumerate(parts)]
        answers = [lm.decode(led.response_ids)
                   for led in _generate_many(lm, jobs, sample=False)]
        hits = [right(a, r) for a, r in zip(answers, refs)]
        groups = Counter(str(ex.id).rsplit("-", 1)[0] for ex, h in zip(examples, hits) if h)
        f1 = sum(token_f1(a, r) for a, r in zip(answers, refs)) / n
        em = sum(exact_match(a, r) for a, r in zip(answers, refs)) / n
        print(f"demo-qa-large, {label}: {sum(hits)} of {n} answers contain the reference; "
              f"mean token F1 {f1:.3f}, exact match {em:.3f}; right by group {dict(groups)}")


if __name__ == "__main__":
    main()
