"""The seeded draw of a token: ``ctxleak.kernels.draw`` (an exponential race whose
exponentials come from a counter-based hash of two keys and the token id, on the device of the
log-probabilities) against ``torch.multinomial`` of one sample (the same race with one
exponential per token from the CPU generator, ctxleak's draw before) and inverse transform
sampling (one uniform number, a float64 cumulative sum and a binary search). All in one process,
interleaved, best of ``--repeat``:

1. one draw from a ``[V]`` row of log-probabilities on ``--device``, at the default model's
   vocabulary (49,152) and an 8B model's (128,256);
2. how often each draw's token changes when the logits carry the float noise two engines
   differ by (``--noise``, Gaussian, on logits shaped like a model's): what keeps the vLLM
   plugin's answers token for token equal to in-process CID;
3. with ``--cid N``: CID decoding of N demo answers x ``--tokens`` new tokens in one batch
   (``cid._generate_many``, λ = 0.5, T = 0.8, every answer at its full length) with each draw,
   against plain ``generate`` of the same 2N prompts; ms per decoding step;
4. each draw's token frequencies on a small distribution.

    python bench/bench_draw.py [--repeat 20] [--device cuda] [--noise 1e-5 1e-6]
        [--cid 16 --tokens 50]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import device_line, load_default, timed_rounds

from ctxleak.kernels.draw import draw, seeded_generator
from ctxleak.mitigations.cid import _generate_many


def multinomial_draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """ctxleak's draw before the hashed race: ``torch.multinomial`` of one sample of the float64
    probabilities on the CPU."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    probs = torch.exp(logprobs - logprobs.max())
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def inverse_draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """Inverse transform sampling: the first token whose cumulative probability (float64, on
    the CPU, in vocabulary order) exceeds u · total for one uniform u from ``generator``."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    cumulative = torch.cumsum(torch.exp(logprobs - logprobs.max()), dim=0)
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    target = torch.tensor([u * float(cumulative[-1])], dtype=torch.float64)
    return min(int(torch.searchsorted(cumulative, target, right=True)),
               int(torch.searchsorted(cumulative, cumulative[-1:])))


def flips(vocab: int, noise: float, n: int) -> str:
    """Draws whose token changes when N(0, noise²) is added to the logits, for each draw, over
    ``n`` seeds on rows shaped like a model's next-token logits (bench_bounded_lambda's)."""
    from bench_bounded_lambda import model_like

    changed = dict.fromkeys(DRAWS, 0)
    noise_g = seeded_generator(9)
    for k in range(n):  # one row at a time: n rows of the vocabulary at once take gigabytes
        _, z = model_like(1, vocab, seed=5 + k, device="cpu")
        clean = torch.log_softmax(z[0].double() / 0.8, 0)
        noisy = torch.log_softmax(z[0].double() / 0.8 + noise * torch.randn(
            vocab, generator=noise_g, dtype=torch.float64), 0)
        for name, fn in DRAWS.items():
            changed[name] += fn(clean, seeded_generator(k), True) != \
                fn(noisy, seeded_generator(k), True)
    return (f"| tokens changed by logit noise of {noise:g}, V = {vocab:,}, {n:,} draws | "
            + " | ".join(str(changed[k]) for k in DRAWS) + " | — |")


def one_draw(vocab: int, repeat: int, device: str) -> str:
    logprobs = torch.log_softmax(2.5 * torch.randn(vocab, generator=seeded_generator(vocab),
                                                   dtype=torch.float64), dim=0).to(device)
    g = seeded_generator(0)
    def twenty(fn: Callable[..., Any]) -> Callable[[], list[Any]]:
        return lambda: [fn(logprobs, g, True) for _ in range(20)]

    got = timed_rounds({k: twenty(fn) for k, fn in DRAWS.items()}, repeat=repeat)
    ms = {k: got[k][0] / 20 * 1e3 for k in DRAWS}
    return (f"| one draw, V = {vocab:,}, log-probs on {device} | "
            + " | ".join(f"{ms[k]:.3f} ms" for k in DRAWS)
            + f" | {ms['multinomial'] / ms['hashed']:.1f}x |")


def frequencies(n: int = 20000) -> str:
    p = np.array([0.4, 0.3, 0.2, 0.1])
    logprobs = torch.log(torch.from_numpy(p))
    out = {}
    for name, fn in DRAWS.items():
        g = seeded_generator(1)
        counts = np.bincount([fn(logprobs, g, True) for _ in range(n)], minlength=4) / n
        out[name] = np.round(counts, 3).tolist()
    return f"# token frequencies over {n:,} draws of p = {p.tolist()}: {out}"


def cid_steps(n: int, tokens: int, repeat: int) -> list[str]:
    from bench_batched import hf_sample

    import ctxleak.engine.streams as streams
    from ctxleak.methods.influence.data import load_examples
    from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts


    lm = load_default()
    print(f"# CID section: {device_line(lm)}, {lm.info.dtype}")
    examples = load_examples("demo", task="auto")[:n]
    setting = Setting.cid(0.5, 0.8)
    parts = [example_parts(lm, ex, setting, InfluenceOptions())[0] for ex in examples]
    opts = InfluenceOptions(max_new_tokens=tokens, min_new_tokens=tokens)
    jobs = [(p.full, p.empty, opts.cid(setting), i) for i, p in enumerate(parts)]
    both = [p.full for p in parts] + [p.empty for p in parts]

    def cid_with(fn):
        def run():
            streams.draw = fn
            try:
                return _generate_many(lm, jobs)
            finally:
                streams.draw = draw
        return run

    _generate_many(lm, jobs[:2])  # warm-up of both routes
    hf_sample(lm, both[:2], 2)
    got = timed_rounds({**{k: cid_with(fn) for k, fn in DRAWS.items()},
                        "generate": lambda: hf_sample(lm, both, tokens)}, repeat=repeat)
    ms = {k: 1e3 * t / tokens for k, (t, _) in got.items()}
    return [f"| CID decoding, {n} answers ({2 * n} rows) x {tokens} tokens, ms per step "
            f"(prefill included) | " + " | ".join(f"{ms[k]:.1f} ms" for k in DRAWS)
            + f" | {ms['multinomial'] / ms['hashed']:.2f}x |",
            f"| CID / plain `generate` of the same {2 * n} prompts ({ms['generate']:.1f} ms per "
            f"step) | " + " | ".join(f"{ms[k] / ms['generate']:.2f}x" for k in DRAWS) + " | |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cid", type=int, default=0, help="answers decoded in one CID batch")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--noise", type=float, nargs="*", default=[1e-5, 1e-6],
                    help="std of the Gaussian noise added to the logits (0 or none: skip)")
    ap.add_argument("--flip-draws", type=int, default=2000)
    ap.add_argument("--device", default="cpu", help="where the one-draw rows' log-probs are")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"best of {args.repeat}")
    print("| what | hashed race (ctxleak) | torch.multinomial (before) | inverse transform | "
          "multinomial / hashed |")
    print("|---|---|---|---|---|")
    for vocab in (49152, 128256):
        print(one_draw(vocab, args.repeat, args.device), flush=True)
    for noise in args.noise:
        print(flips(49152, noise, args.flip_draws), flush=True)
    if args.cid:
        t0 = time.perf_counter()
        for line in cid_steps(args.cid, args.tokens, max(1, args.repeat // 10)):
            print(line, flush=True)
        print(f"# CID section: {time.perf_counter() - t0:.1f} s")
    print(frequencies())


#: The draws compared, each (log-probs, generator, sample) -> token id.
DRAWS = {"hashed": draw, "multinomial": multinomial_draw, "inverse": inverse_draw}

if __name__ == "__main__":
    main()
