"""The seeded draw of a token from a distribution, torch only: each example draws from its own
CPU generator seeded by its own seed, in float64 on the CPU, so its tokens depend neither on the
examples decoded with it nor on the device's random number generator."""

from __future__ import annotations

import torch


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``seed``: one per example, drawn from by it alone."""
    return torch.Generator(device="cpu").manual_seed(seed)


def draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """One token id from the log-probabilities ``logprobs`` ``[V]``: drawn with ``generator``
    (``sample``), or the most likely one (greedy). The probabilities are
    ``exp(logprobs − max)`` normalised in float64 on the CPU."""
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    probs = torch.exp(logprobs - logprobs.max())
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
