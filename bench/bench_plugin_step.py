"""The vLLM plugin's own cost per decoding step, without vLLM: ``PairBook.apply`` (the step that
Model Runner V1 and V2 both call) deciding N answers' CID step from their ``[2N, V]`` logits on
``--device`` (where a GPU server hands them over), plain CID (λ = 0.5) and bounded CID (ε = 2
per token), T = 0.8, logits shaped like a model's (bench_bounded_lambda's). ms per step (best of
``--repeat`` rounds of ``--steps`` steps) and per answer, with ctxleak's draw and, for comparison,
the draws of bench_draw.py (``--draws``: ``multinomial``, the draw before, on the CPU), and with
bounded CID's λ_t searched for all answers of a step together (ctxleak's way) or, for
comparison, one answer at a time (``--search alone``, the way before).

    python bench/bench_plugin_step.py [--device cuda] [--vocab 49152 128256] [--answers 1 8 32]
        [--draws hashed multinomial] [--search together alone]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from bench_bounded_lambda import model_like
from bench_draw import DRAWS

import ctxleak.plugins.cid_pairs as cid_pairs
from ctxleak.plugins.cid_pairs import PairBook
from ctxleak.plugins.protocol import PairSettings


def step_ms(answers: int, vocab: int, eps: float | None, device: str, steps: int,
            repeat: int) -> float:
    """Best of ``repeat`` rounds: ms per step of ``answers`` pairs decided together."""
    zc, ze = model_like(answers, vocab, 0, device)
    logits = torch.stack([zc, ze], dim=1).reshape(2 * answers, vocab)
    best = float("inf")
    for _ in range(repeat):
        book = PairBook(lambda *_: None, {}, vocab=vocab)
        rows = []
        for a in range(answers):
            s = PairSettings(pair=f"p{a}", context_digest="c", lam=1.0 if eps else 0.5,
                             temperature=0.8, seed=a, greedy=False, eps=eps, min_new_tokens=0,
                             stops=(2,))
            rows += [(2 * a, book.admit(s, steps + 1, None, digest="c")),
                     (2 * a + 1, book.admit(s, steps + 1, None, digest="e"))]
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for step in range(steps):
            book.apply(logits.clone(), [(i, m, step) for i, m in rows])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / steps * 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vocab", type=int, nargs="+", default=[49152, 128256])
    ap.add_argument("--answers", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--draws", nargs="+", default=["hashed"], choices=sorted(DRAWS))
    ap.add_argument("--search", nargs="+", default=["together"], choices=["together", "alone"])
    a = ap.parse_args()
    name = torch.cuda.get_device_name() if a.device.startswith("cuda") else \
        platform.processor() or platform.machine()
    print(f"# {name}, {torch.get_num_threads()} CPU threads, logits on {a.device}, best of "
          f"{a.repeat} x {a.steps} steps")
    print("| draw | λ_t search | V | answers | plain CID ms per step | per answer | bounded CID "
          "ms per step | per answer |")
    print("|---|---|---|---|---|---|---|---|")
    together = PairBook._search_together
    for vocab in a.vocab:
        for n in a.answers:
            for name, search in [(d, s) for d in a.draws for s in a.search]:
                cid_pairs.draw = DRAWS[name]
                PairBook._search_together = (  # type: ignore[method-assign]
                    together if search == "together" else (lambda self, logits, by_pair: {}))
                plain = step_ms(n, vocab, None, a.device, a.steps, a.repeat)
                bounded = step_ms(n, vocab, 2.0, a.device, a.steps, a.repeat)
                print(f"| {name} | {search} | {vocab:,} | {n} | {plain:.1f} | {plain / n:.2f} | "
                      f"{bounded:.1f} | {bounded / n:.2f} |", flush=True)


if __name__ == "__main__":
    main()
