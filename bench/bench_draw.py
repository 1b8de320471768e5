"""The seeded draw of a token (``ctxleak.kernels.draw``: one uniform number, a float64 cumulative
sum and a binary search on the CPU) against ``torch.multinomial``, the draw it replaced, which
for one sample draws one exponential number per token of the vocabulary. Both are timed in one
process, interleaved, best of ``--repeat``:

1. one draw from a ``[V]`` row of log-probabilities, at the default model's vocabulary (49,152)
   and an 8B model's (128,256), and the two draws' token frequencies on a small distribution
   (they differ token by token, not in distribution);
2. with ``--cid N``: CID decoding of N demo examples x ``--tokens`` new tokens in one batch
   (``generate_cid_many``, λ = 0.5, T = 0.8, every answer at its full length), each draw
   replaced by the ``torch.multinomial`` one for the reference run, and plain batched
   ``generate`` of the same 2N prompts (with and without context) as the floor; per decoding
   step in ms.

    python bench/bench_draw.py [--repeat 20] [--cid 16 --tokens 50]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch
from _common import device_line, load_default, timed_rounds

from ctxleak.kernels.draw import draw, seeded_generator


def multinomial_draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """The draw before: ``torch.multinomial`` of ``exp(logprobs − max)`` normalised, in
    float64 on the CPU."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    probs = torch.exp(logprobs - logprobs.max())
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def one_draw(vocab: int, repeat: int) -> str:
    logprobs = torch.log_softmax(2.5 * torch.randn(vocab, generator=seeded_generator(vocab),
                                                   dtype=torch.float64), dim=0)
    g = seeded_generator(0)
    got = timed_rounds({"multinomial": lambda: [multinomial_draw(logprobs, g, True)
                                                for _ in range(20)],
                        "inverse": lambda: [draw(logprobs, g, True) for _ in range(20)]},
                       repeat=repeat)
    old, new = got["multinomial"][0] / 20 * 1e3, got["inverse"][0] / 20 * 1e3
    return f"| one draw, V = {vocab:,} | {old:.2f} ms | {new:.3f} ms | {old / new:.1f}x |"


def frequencies(n: int = 20000) -> str:
    p = np.array([0.4, 0.3, 0.2, 0.1])
    logprobs = torch.log(torch.from_numpy(p))
    out = []
    for fn in (multinomial_draw, draw):
        g = seeded_generator(1)
        out.append(np.bincount([fn(logprobs, g, True) for _ in range(n)], minlength=4) / n)
    return (f"# token frequencies over {n:,} draws of p = {p.tolist()}: multinomial "
            f"{np.round(out[0], 3).tolist()}, inverse transform {np.round(out[1], 3).tolist()}")


def cid_steps(n: int, tokens: int, repeat: int) -> list[str]:
    from bench_batched import hf_sample

    import ctxleak.engine.streams as streams
    from ctxleak.methods.influence.data import load_examples
    from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
    from ctxleak.mitigations.cid import generate_cid_many

    lm = load_default()
    print(f"# CID section: {device_line(lm)}, {lm.info.dtype}")
    examples = load_examples("demo", task="auto")[:n]
    setting = Setting(0.5, 0.8)
    parts = [example_parts(lm, ex, setting, InfluenceOptions())[0] for ex in examples]
    opts = InfluenceOptions(max_new_tokens=tokens, min_new_tokens=tokens)
    jobs = [(p.full, p.empty, opts.cid(setting), i) for i, p in enumerate(parts)]
    both = [p.full for p in parts] + [p.empty for p in parts]

    def cid_with(fn):
        def run():
            streams.draw = fn
            try:
                return generate_cid_many(lm, jobs)
            finally:
                streams.draw = draw
        return run

    generate_cid_many(lm, jobs[:2])  # warm-up of both routes
    hf_sample(lm, both[:2], 2)
    got = timed_rounds({"multinomial": cid_with(multinomial_draw), "inverse": cid_with(draw),
                        "generate": lambda: hf_sample(lm, both, tokens)}, repeat=repeat)
    ms = {k: 1e3 * t / tokens for k, (t, _) in got.items()}
    return [f"| CID decoding, {n} answers ({2 * n} rows) x {tokens} tokens, ms per step "
            f"(prefill included) | {ms['multinomial']:.1f} ms | {ms['inverse']:.1f} ms | "
            f"{ms['multinomial'] / ms['inverse']:.2f}x |",
            f"| plain `generate` of the same {2 * n} prompts, ms per step: CID / generate "
            f"before {ms['multinomial'] / ms['generate']:.2f}x, after "
            f"{ms['inverse'] / ms['generate']:.2f}x | {ms['generate']:.1f} ms | | |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cid", type=int, default=0, help="answers decoded in one CID batch")
    ap.add_argument("--tokens", type=int, default=50)
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, draws on the CPU, "
          f"{torch.get_num_threads()} threads, best of {args.repeat}")
    print("| what | torch.multinomial | inverse transform (ctxleak) | speed-up |")
    print("|---|---|---|---|")
    for vocab in (49152, 128256):
        print(one_draw(vocab, args.repeat), flush=True)
    if args.cid:
        t0 = time.perf_counter()
        for line in cid_steps(args.cid, args.tokens, max(1, args.repeat // 10)):
            print(line, flush=True)
        print(f"# CID section: {time.perf_counter() - t0:.1f} s")
    print(frequencies())


if __name__ == "__main__":
    main()
