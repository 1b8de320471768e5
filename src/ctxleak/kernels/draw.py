"""The seeded draw of a token from a distribution, torch only: each example draws from its own
CPU generator seeded by its own seed, in float64 on the CPU, so its tokens depend neither on the
examples decoded with it nor on the device's random number generator.

The draw is ``torch.multinomial`` of one sample, which draws one exponential number E_y per
token and takes the token of largest ``p(y) / E_y``. That costs a random number per token of the
vocabulary (about 1.9 ms at 49,152 tokens and 4.5 ms at 128,256 on the CPU of the H200 machine
measured), where inverse transform sampling (one uniform number, a cumulative sum, a binary search)
costs a tenth of it. It is kept because two engines' float noise rarely changes its token: the
token changes only where two tokens' ``p / E`` are within that noise of each other, whereas an
inverse transform changes its token whenever the uniform number falls among the tokens whose
cumulative probability the noise has moved, which the long tail of a vocabulary makes frequent
(with noise of 1e-5 on logits shaped like a model's, 49,152 tokens: 0 of 2,000 draws changed by
this draw, 18 by the inverse transform; ``bench/bench_draw.py``). The vLLM plugin and in-process
CID give the same tokens because of it.
"""

from __future__ import annotations

import math

import torch


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``seed``: one per example, drawn from by it alone."""
    return torch.Generator(device="cpu").manual_seed(seed)


def draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """One token id from the log-probabilities ``logprobs`` ``[V]``: drawn with ``generator``
    (``sample``), or the most likely one (greedy). The probabilities are
    ``exp(logprobs − max)`` normalised in float64 on the CPU. Raises ``ValueError`` where no
    token has a finite, positive probability (NaN logits, or every token masked)."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    probs = torch.exp(logprobs - logprobs.max())
    total = float(probs.sum())
    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"cannot draw a token: the probabilities sum to {total} "
                         f"(NaN logits, or every token masked)")
    return int(torch.multinomial(probs / total, 1, generator=generator))
