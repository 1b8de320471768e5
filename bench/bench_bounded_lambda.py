"""Bounded CID's λ_t search (Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, App. B, Alg. 1 line 2) against the 40-step bisection it replaced, on
float32 logits shaped like a model's: ``[rows, vocab]`` no-context logits (normal, a few
favourites lifted) and context logits that perturb them and lift a few context-supported
tokens. Both run in one process, interleaved, best of ``--repeat``; the ratio is measured in the
same run. The passes over the vocabulary are counted per row (the one at λ_max included).

    python bench/bench_bounded_lambda.py [--rows 8 1] [--vocab 49152] [--eps 0.5 2 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform

import torch
from _common import timed_rounds

from ctxleak.kernels import cid
from ctxleak.kernels.cid import BOUND_MARGIN, MASKED_LOGIT, bounded_lambdas, cid_logprobs


def naive(z_context, z_empty, eps, lam_max, temperature, passes=None):
    """The bisection ``bounded_lambdas`` ran before the Halley search: 40 halvings after the pass at
    λ_max, every row of the batch probed at every step."""
    zc, ze = z_context.double(), z_empty.double()
    base = torch.log_softmax(ze / temperature, dim=-1)
    invalid = (ze <= MASKED_LOGIT / 2) | (zc <= MASKED_LOGIT / 2)
    half = eps / 2.0 - BOUND_MARGIN

    def divergence(lam):
        if passes is not None:
            passes.append(lam.numel())
        diff = (cid_logprobs(zc, ze, lam, temperature) - base).abs()
        return diff.masked_fill(invalid, 0.0).amax(dim=-1)

    cap = torch.full((zc.shape[0],), float(lam_max), dtype=torch.float64, device=zc.device)
    top = divergence(cap)
    binds = ~(top <= half)
    if not bool(binds.any()):
        return cap, top
    lo, hi, lo_div = torch.zeros_like(cap), cap.clone(), torch.zeros_like(cap)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        d = divergence(mid)
        ok = d <= half
        lo, lo_div = torch.where(ok, mid, lo), torch.where(ok, d, lo_div)
        hi = torch.where(ok, hi, mid)
    return torch.where(binds, lo, cap), torch.where(binds, lo_div, top)


def model_like(rows: int, vocab: int, seed: int, device: str):
    """float32 ``(z_D, z_∅)``: z_∅ ~ N(0, 2.5²) with 8 favourites lifted by 8; z_D = z_∅ plus
    N(0, 0.7²) noise and 4 context-supported tokens lifted by 6."""
    g = torch.Generator().manual_seed(seed)
    ze = torch.randn(rows, vocab, generator=g) * 2.5
    ze.scatter_add_(1, torch.randint(0, vocab, (rows, 8), generator=g), torch.full((rows, 8), 8.0))
    zc = ze + torch.randn(rows, vocab, generator=g) * 0.7
    zc.scatter_add_(1, torch.randint(0, vocab, (rows, 4), generator=g), torch.full((rows, 4), 6.0))
    return zc.to(device), ze.to(device)


def counted_passes(zc, ze, eps, lam_max, temperature) -> tuple[float, float]:
    """Passes over the vocabulary per row: the bisection's, the search's (one untimed run
    each)."""
    seen: list[int] = []
    naive(zc, ze, eps, lam_max, temperature, passes=seen)
    old = sum(seen) / zc.shape[0]
    probe, rows = cid._probe, [0]

    def counting(r, *rest, **named):
        rows[0] += r.zc.shape[0]
        return probe(r, *rest, **named)

    cid._probe = counting
    try:
        bounded_lambdas(zc, ze, eps, lam_max, temperature)
    finally:
        cid._probe = probe
    return old, rows[0] / zc.shape[0]


def measure(rows: int, eps: float, args: argparse.Namespace) -> str:
    """One table row: both searches on the same logits, interleaved, best of ``args.repeat``."""
    zc, ze = model_like(rows, args.vocab, seed=rows, device=args.device)
    setting = (eps, args.lam_max, args.temperature)
    got = timed_rounds({"naive": lambda: naive(zc, ze, *setting),
                        "search": lambda: bounded_lambdas(zc, ze, *setting)}, repeat=args.repeat)
    (t_old, old), (t_new, new) = got["naive"], got["search"]
    lam_old, lam_new, div_new = old[0], new[0], new[1]
    old_passes, new_passes = counted_passes(zc, ze, *setting)
    held = bool(((div_new <= eps / 2 - BOUND_MARGIN) | (lam_new == args.lam_max)).all())
    return (f"| {rows} x {args.vocab} | {eps:g} | {float(lam_new.mean()):.4f} | "
            f"{old_passes:.0f} / {new_passes:.2f} | {t_old * 1e3:.1f} | {t_new * 1e3:.1f} | "
            f"{t_old / t_new:.2f}x | {float((lam_new - lam_old).abs().max()):.1e} | {held} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 1])
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    ap.add_argument("--lam-max", type=float, default=1.0)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = args.device + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "")
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"{dev}; float32 logits, V = {args.vocab}, λ_max = {args.lam_max}, "
          f"T = {args.temperature}, best of {args.repeat}")
    print("| rows x V | ε | mean λ_t | passes per row (bisection / search) | bisection ms | "
          "search ms | speed-up | max \\|Δλ_t\\| | bound held |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rows in args.rows:
        for eps in args.eps:
            print(measure(rows, eps, args), flush=True)


if __name__ == "__main__":
    main()
