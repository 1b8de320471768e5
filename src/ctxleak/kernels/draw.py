"""The seeded draw of a token from a distribution, torch only: each example draws from its own
CPU generator seeded by its own seed, in float64 on the CPU, so its tokens depend neither on the
examples decoded with it nor on the device's random number generator.

A draw takes one uniform number u from the example's generator and returns the first token
whose cumulative probability exceeds u (inverse transform sampling, in vocabulary order). This
is written here rather than calling ``torch.multinomial``: for one sample that function draws one
exponential number per token of the vocabulary (its argmax-of-``p/q`` route), about 1.5 ms on
49,152 tokens and 4.8 ms on 128,256 on one CPU core, where a cumulative sum and a binary search
take 0.1 to 0.7 ms. Every decoding step of every answer makes one draw, so on a GPU, where the
model's own step takes a few milliseconds, the draw was most of CID's step.
"""

from __future__ import annotations

import torch


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``seed``: one per example, drawn from by it alone."""
    return torch.Generator(device="cpu").manual_seed(seed)


def token_at(cumulative: torch.Tensor, u: float) -> int:
    """The first index whose entry of the non-decreasing float64 ``cumulative`` (``[V]``, a
    running sum of probabilities, not necessarily normalised) exceeds ``u · cumulative[-1]``,
    for ``u`` in [0, 1): the token of inverse transform sampling. A token of probability 0 adds
    nothing to the sum, so it is never the first to exceed it. Where rounding puts
    ``u · total`` at the total itself, the last token of positive probability is taken."""
    total = float(cumulative[-1])
    target = torch.tensor([u * total], dtype=torch.float64)
    index = int(torch.searchsorted(cumulative, target, right=True))
    if index < cumulative.shape[0]:
        return index
    return int(torch.searchsorted(cumulative, torch.tensor([total], dtype=torch.float64)))


def draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """One token id from the log-probabilities ``logprobs`` ``[V]``: drawn with ``generator``
    (``sample``: one uniform number per draw, :func:`token_at` of the cumulative probabilities
    ``exp(logprobs − max)`` summed in float64 on the CPU), or the most likely one (greedy).
    Raises ``ValueError`` where no token has a finite, positive probability (NaN logits, or
    every token masked)."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    cumulative = torch.cumsum(torch.exp(logprobs - logprobs.max()), dim=0)
    total = float(cumulative[-1])
    if not (total > 0 and total < float("inf")):
        raise ValueError(f"cannot draw a token: the probabilities sum to {total} "
                         f"(NaN logits, or every token masked)")
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    return token_at(cumulative, u)
