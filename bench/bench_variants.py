"""Prompts with one document left out, each kept as a KV cache of its own, against one shared
pass over all of them, on the default model: a mixed sweep (the six settings of
tests/methods/influence/test_mechanism_sweep_default.py on one question of ``demo-qa-large``,
four documents) and a single-setting RAG span audit (``demo-rag-spans``, first six turns).

Each answer is scored with its context and without each retrieved document ("Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1 with S = one document).
The shared way puts an answer's prompts without each document in one pass, each after the full
prompt's KV cache up to the document, padded to the longest, and computes them again for every
setting of a sweep, which scores another answer after the same prompts. ctxleak keeps each
such prompt's cache (built on the full prompt's, inside the run's shared prefixes): a sweep's
settings compute it once, and nothing is padded. The benchmark prints each side's CPU seconds
(this process's, best of ``--repeat``, rounds interleaved), their ratio, and the largest
difference of a number between the two sides' records (float rounding of passes of other
shapes: at most 1e-4 nats).

    python bench/bench_variants.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from _common import device_line, load_default, timed_rounds
from bench_rag_spans import largest_difference

import ctxleak
from ctxleak.methods.influence import ngrams

MECHANISMS = ["dp-vote:eps=2,shards=4", "dp-sparse-vote:eps=2,shards=4", "dp-rag:eps=5",
              "scrub:operator=replace"]
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "mixed sweep, 6 settings, 1 question": (
        "demo-qa-large", dict(limit=1, lambda_=1, bounded_eps="none,2", mechanisms=MECHANISMS,
                              max_new_tokens=8, control=False)),
    "RAG span audit, 1 setting, 6 turns": (
        "demo-rag-spans", dict(limit=6, min_new_tokens=0, class_budgets={"restricted": 0})),
}
TOLERANCE = 1e-4


@contextmanager
def shared_pass() -> Iterator[None]:
    """The prompts without a document in one shared pass per answer, as before they kept caches
    of their own."""
    real = ngrams.keeps_variants
    ngrams.keeps_variants = lambda: False
    try:
        yield
    finally:
        ngrams.keeps_variants = real


def run(lm: Any, data: str, kw: dict[str, Any]) -> list[Any]:
    with tempfile.TemporaryDirectory() as folder:
        ctxleak.influence(lm, data, progress=False, output=f"{folder}/run", **kw)
        with open(f"{folder}/run/samples.jsonl", encoding="utf-8") as f:
            return [json.loads(line) for line in f]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    lm = load_default()
    print(device_line(lm))
    run(lm, "demo-rag-spans", dict(limit=1, min_new_tokens=0))  # warm-up: the detectors load

    for label, (data, kw) in RUNS.items():
        def side(kept: bool, data: str = data, kw: dict[str, Any] = kw) -> Callable[[], Any]:
            def go() -> list[Any]:
                with nullcontext() if kept else shared_pass():
                    return run(lm, data, kw)
            return go

        times = timed_rounds({"shared": side(False), "kept": side(True)}, repeat=args.repeat,
                             clock=time.process_time)
        (t_shared, r_shared), (t_kept, r_kept) = times["shared"], times["kept"]
        gap = max(largest_difference(a, b) for a, b in zip(r_shared, r_kept))
        print(f"{label}: CPU seconds, one shared pass {t_shared:.1f} s, kept prompts "
              f"{t_kept:.1f} s: {t_shared / t_kept:.2f}x (largest difference of a number in the "
              f"records: {gap:.1e})")
        assert len(r_shared) == len(r_kept) and gap <= TOLERANCE, f"records differ by {gap}"


if __name__ == "__main__":
    main()
