"""The RAG span audit of the bundled log (``demo-rag-spans``) on the default model: ctxleak's
scoring of the controls against the straightforward one, in one run, and where the forward
passes go.

The audit scores each logged answer with its context, without it and without each retrieved
document, then under its controls: other contexts, and per document a decoy in its place
("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2,
and its per-document control). The straightforward way scores a control or decoy prompt as it
scores the answer itself: the whole prompt computed on its own, with the no-context logits too,
which the mixture does not read at λ = 1 and the answer's record already holds. ctxleak scores
only the prompt with the other context, and starts it from the KV cache of the answer's own
prompt up to where the two differ (the template before the context; for a decoy, the documents
before the one it replaces). The two sides' records agree to float rounding (the prefix's
floats come from another pass: checked, every number within 1e-4); the benchmark prints each
side's CPU seconds (this process's, best of ``--repeat``, rounds interleaved: on a shared
machine wall time follows the other jobs' load more than the work), their ratio, and each
side's forward passes and token positions per part. The call is the one of
tests/methods/rag/test_rag_audit_default.py (its first twelve turns: ``--turns 12``).

    python bench/bench_rag_spans.py [--turns 3] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
from _common import device_line, load_default, timed_rounds

import ctxleak
from ctxleak.engine.local import scoring
from ctxleak.methods.influence import pipeline

#: The parts of a turn's scoring, by the function of the pipeline that asks for the passes.
PARTS = {"_no_context_logits": "answer without the context",
         "_add_control": "controls and decoys (the other context)"}
WITH_CONTEXT = "answer with the context, each document left out"


def straightforward_score_under(lm: Any, jobs: Sequence[Any], answers: Sequence[Sequence[int]],
                                owners: Sequence[int], parts: Sequence[Any], options: Any,
                                scorer: Any, bases: Any = None
                                ) -> tuple[list[np.ndarray], list[Any]]:
    """The control's scoring the straightforward way: answers drawn elsewhere scored in-process
    as the answer itself is (each prompt whole, with the no-context row, then dropped); other
    roads unchanged but for the prompts' bases (none)."""
    if scorer is not pipeline._score_in_process:
        return REAL_SCORE_UNDER(lm, jobs, answers, owners, parts, options, scorer)
    ledgers = scorer(lm, pipeline.answers_under(jobs, answers, owners, parts, options)).ledgers
    return [np.array([e.logp_context for e in led.entries], dtype=np.float64)
            for led in ledgers], []


REAL_SCORE_UNDER = pipeline._score_under


@contextmanager
def straightforward() -> Iterator[None]:
    pipeline._score_under = straightforward_score_under
    try:
        yield
    finally:
        pipeline._score_under = REAL_SCORE_UNDER


@contextmanager
def counted(passes: Counter[str], positions: Counter[str]) -> Iterator[None]:
    """Within the block, each forward pass of in-process scoring counted by part: passes, and
    token positions computed (rows times columns, padding included)."""
    real = scoring.hidden_states

    def counting(lm: Any, input_ids: Any = None, *args: Any, **kwargs: Any) -> Any:
        names = {frame.name for frame in traceback.extract_stack()}
        part = next((label for name, label in PARTS.items() if name in names), WITH_CONTEXT)
        passes[part] += 1
        positions[part] += int(input_ids.shape[0]) * int(input_ids.shape[1])
        return real(lm, input_ids, *args, **kwargs)

    scoring.hidden_states = counting
    try:
        yield
    finally:
        scoring.hidden_states = real


#: How far a number of the two sides' records may differ: float32 rounding of a prefix's
#: hidden states computed in another pass, summed over an answer's tokens (nats).
TOLERANCE = 1e-4


def largest_difference(a: Any, b: Any) -> float:
    """The largest absolute difference between two JSON values' numbers (inf where anything
    else differs), keys about time left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return float("inf")
        return max((largest_difference(a[k], b[k]) for k in a if "second" not in k), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max((largest_difference(x, y) for x, y in zip(a, b)), default=0.0)
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return abs(float(a) - float(b))
    return 0.0 if a == b else float("inf")


def audit(lm: Any, turns: int) -> list[str]:
    """The span audit of the first ``turns`` turns, as the integration test runs it: its
    records as JSON."""
    with tempfile.TemporaryDirectory() as folder:
        res = ctxleak.influence(lm, "demo-rag-spans", limit=turns, min_new_tokens=0,
                                class_budgets={"restricted": 0}, progress=False,
                                output=f"{folder}/run")
        return [json.dumps(r, sort_keys=True) for r in res.records]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    lm = load_default()
    print(device_line(lm))
    audit(lm, 1)  # warm-up: the detectors' engines load once per process

    counts = {side: (Counter[str](), Counter[str]()) for side in ("straightforward", "ctxleak")}

    def side(name: str) -> Any:
        def run() -> list[str]:
            for counter in counts[name]:
                counter.clear()
            with counted(*counts[name]), (straightforward() if name == "straightforward"
                                          else nullcontext()):
                return audit(lm, args.turns)
        return run

    times = timed_rounds({name: side(name) for name in counts}, repeat=args.repeat,
                         clock=time.process_time)
    (t_naive, r_naive), (t_ours, r_ours) = times["straightforward"], times["ctxleak"]
    gap = max(largest_difference(json.loads(a), json.loads(b)) for a, b in zip(r_ours, r_naive))
    print(f"span audit of {args.turns} turns, CPU seconds: straightforward {t_naive:.1f} s, "
          f"ctxleak {t_ours:.1f} s: {t_naive / t_ours:.2f}x (largest difference of a number "
          f"in the records: {gap:.1e})")
    assert len(r_ours) == len(r_naive) and gap <= TOLERANCE, f"the records differ by {gap}"
    print("forward passes and token positions (rows x columns, padding included), "
          "straightforward -> ctxleak:")
    (n_passes, n_positions), (passes, positions) = counts["straightforward"], counts["ctxleak"]
    for part in (WITH_CONTEXT, *PARTS.values(), None):
        a, b = ((sum(n_passes.values()), sum(passes.values())) if part is None
                else (n_passes[part], passes[part]))
        c, d = ((sum(n_positions.values()), sum(positions.values())) if part is None
                else (n_positions[part], positions[part]))
        print(f"  {part or 'in all'}: {a} -> {b} passes, {c:,} -> {d:,} positions")

if __name__ == "__main__":
    main()
