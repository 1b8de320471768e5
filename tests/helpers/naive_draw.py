"""The seeded draw written independently of ``ctxleak.kernels.draw``, in numpy's uint32
arithmetic (which wraps by definition, where ctxleak's torch version keeps int64 values below
2**63): the naive references of the decoding tests draw their tokens with it."""

from __future__ import annotations

import numpy as np
import torch


def mix32(x: np.ndarray) -> np.ndarray:
    """xor-shift 16, times 0x7FEB352D, xor-shift 15, times 0x5BD1E995, xor-shift 16 (mod 2**32)."""
    x = x.astype(np.uint32)
    x = (x ^ (x >> np.uint32(16))) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> np.uint32(15))) * np.uint32(0x5BD1E995)
    return x ^ (x >> np.uint32(16))


def uniforms(keys: tuple[int, int], n: int) -> np.ndarray:
    """The i-th of n, with t = mix32(mix32(i) ^ k0) ^ k1: (top 27 bits of mix32(t) · 2**26 + top
    26 bits of mix32(t ^ mix32(n + i)) + ½) / 2**53."""
    counters = mix32(np.arange(2 * n, dtype=np.uint64))
    t = mix32(counters[:n] ^ np.uint32(keys[0])) ^ np.uint32(keys[1])
    high = mix32(t) >> np.uint32(5)
    low = mix32(t ^ counters[n:]) >> np.uint32(6)
    return (high.astype(np.float64) * 2.0**26 + low.astype(np.float64) + 0.5) / 2.0**53


def naive_draw(logprobs: torch.Tensor, generator: torch.Generator) -> int:
    """The token of largest log p(y) − log E_y, E_y = −log u_y, the two keys of the u's drawn
    from ``generator`` as two integers in [0, 2**32)."""
    keys = torch.randint(0, 2**32, (2,), generator=generator).tolist()
    lp = logprobs.detach().double().cpu().numpy()
    return int(np.argmax(lp - np.log(-np.log(uniforms((keys[0], keys[1]), lp.shape[-1])))))
