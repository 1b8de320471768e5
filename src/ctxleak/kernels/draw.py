"""The seeded draw of a token from a distribution, torch only: each example draws from its own
CPU generator seeded by its own seed, so its tokens depend neither on the examples decoded with
it nor on the device the log-probabilities are on.

The draw is an exponential race (the Gumbel-max trick): each token y gets its own exponential
number E_y, and the token of largest ``p(y) / E_y`` is drawn, with probability p(y). The
exponentials come from a counter-based hash (:func:`uniforms`) of two 32-bit keys, which the
example's generator gives once per draw, and the token's id: integer arithmetic that gives the
same numbers on every device, one vectorised pass over the vocabulary on the device that holds
the log-probabilities. ``torch.multinomial`` of one sample, the draw before, made the same race
with one exponential number per token from the CPU generator (about 1.9 ms at 49,152 tokens and
4.5 ms at 128,256 on the CPU of the H200 machine measured, and a copy of the row to the CPU).

An exponential race is kept because two engines' float noise rarely changes its token: the
token changes only where two tokens' ``p / E`` are within that noise of each other, whereas an
inverse transform (one uniform number, a cumulative sum) changes its token whenever the uniform
number falls among the tokens whose cumulative probability the noise has moved, which the long
tail of a vocabulary makes frequent (with noise of 1e-5 on logits shaped like a model's, 49,152
tokens: 0 of 2,000 draws changed by the race, 18 by the inverse transform; ``bench/bench_draw.py``).
The vLLM plugin and in-process CID give the same tokens because of it.
"""

from __future__ import annotations

import math

import torch

#: The hash's rounds: (right shift, odd multiplier below 2**31). A value below 2**32 times a
#: multiplier below 2**31 stays below 2**63, so int64 arithmetic never overflows and every
#: device computes the same bits. Written by hand: torch has no counter-based generator whose
#: numbers are the same on the CPU and on a GPU.
_ROUNDS = ((16, 0x7FEB352D), (15, 0x5BD1E995))
#: Which draw made a run's sampled tokens, recorded in every results.json's provenance: the
#: same seed gives other tokens under another draw (until 2026-11-28: ``torch.multinomial``).
DRAW = "exponential race, counter-hashed (ctxleak.kernels.draw, 2026-11-28)"
_LOW32 = 0xFFFFFFFF
#: mix32 of the counters 0 .. 2n - 1, per (n, device).
_counters: dict[tuple[int, str], torch.Tensor] = {}


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by ``seed``: one per example, drawn from by it alone."""
    return torch.Generator(device="cpu").manual_seed(seed)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift and multiply rounds, the shape of MurmurHash3's
    finaliser) of an int64 tensor of values in [0, 2**32), elementwise: values in [0, 2**32)."""
    for shift, multiplier in _ROUNDS:
        x = ((x ^ (x >> shift)) * multiplier) & _LOW32
    return x ^ (x >> 16)


def uniforms(keys: tuple[int, int], n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``n`` uniform numbers in (0, 1), float64 ``[n]``, the i-th a function of ``keys`` (two
    integers in [0, 2**32)) and i alone: with ``t = mix32(mix32(i) ^ keys[0]) ^ keys[1]``, the top
    27 bits of ``mix32(t)`` above the top 26 of ``mix32(t ^ mix32(n + i))``, plus one half, over
    2**53 (never 0 or 1). ``mix32`` is a bijection of 32-bit values, so the n numbers of one call
    come from n distinct hashes, and every bit depends on both keys. The same numbers on every
    device; ``mix32`` of the counters is kept per size and device."""
    if not 0 < n < 2**31:
        raise ValueError(f"cannot hash {n} counters (1 to 2**31 - 1)")
    if not all(0 <= k <= _LOW32 for k in keys):
        raise ValueError(f"the hash's keys must be in [0, 2**32), got {keys}")
    hashed = _counters.get((n, str(device)))
    if hashed is None:
        hashed = mix32(torch.arange(2 * n, dtype=torch.int64, device=device))
        _counters[(n, str(device))] = hashed
    t = mix32(hashed[:n] ^ keys[0]) ^ keys[1]
    high, low = mix32(t) >> 5, mix32(t ^ hashed[n:]) >> 6
    return (high.double() * 2.0**26 + low.double() + 0.5) * 2.0**-53


def draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    """One token id from the log-probabilities ``logprobs`` ``[V]`` (normalised or not), on
    whatever device they are: drawn with ``generator`` (``sample``: the token of largest
    ``log p(y) − log E_y``, the exponentials ``E_y = −log u_y`` from :func:`uniforms` with two
    keys drawn from ``generator``), or the most likely one (greedy). In float64. Raises
    ``ValueError`` where no token has a finite log-probability (NaN logits, or every token
    masked by −inf)."""
    logprobs = logprobs.detach().to(torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    top = float(logprobs.max())
    if not math.isfinite(top):
        raise ValueError(f"cannot draw a token: the largest log-probability is {top} "
                         f"(NaN logits, or every token masked)")
    first, second = torch.randint(0, 2**32, (2,), generator=generator).tolist()
    exponentials = -torch.log(uniforms((first, second), logprobs.shape[-1], logprobs.device))
    return int(torch.argmax(logprobs - torch.log(exponentials)))
