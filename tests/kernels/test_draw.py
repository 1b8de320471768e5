"""The seeded draw: its distribution, masked tokens, its errors, and that float noise between
two engines' logits leaves its tokens alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.kernels.draw import draw, seeded_generator


def test_frequencies_follow_the_distribution():
    p = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    logprobs = torch.log(torch.from_numpy(p)) + 3.0  # not normalised: the draw normalises
    g, n = seeded_generator(0), 20000
    counts = np.bincount([draw(logprobs, g, True) for _ in range(n)], minlength=5)
    sigma = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) < 4.5 * sigma), counts


def test_a_token_depends_on_its_own_seed_alone():
    logprobs = torch.log_softmax(torch.randn(500, dtype=torch.float64), 0)
    alone = [draw(logprobs, seeded_generator(s), True) for s in range(20)]
    others = seeded_generator(99)
    mixed = []
    for s in range(20):  # draws from other generators in between change nothing
        draw(logprobs, others, True)
        mixed.append(draw(logprobs, seeded_generator(s), True))
    assert alone == mixed and len(set(alone)) > 5


def test_masked_tokens_are_never_drawn_at_either_end():
    logits = torch.full((7,), MASKED_LOGIT, dtype=torch.float64)
    logits[2], logits[4] = 0.0, 0.5
    g = seeded_generator(1)
    assert {draw(logits, g, True) for _ in range(300)} == {2, 4}
    assert draw(logits, g, False) == 4


def test_float_noise_between_engines_leaves_the_tokens_alone():
    """Logits that differ by what two engines' float32 kernels differ by (1e-5) give the same
    token from the same seed: the token changes only where two tokens' p/E nearly tie. (An
    inverse transform draw changes about 1 in 100 such tokens, bench/bench_draw.py.)"""
    g = torch.Generator().manual_seed(4)
    for k in range(300):
        z = 2.5 * torch.randn(49152, generator=g, dtype=torch.float64)
        noisy = z + 1e-5 * torch.randn(49152, generator=g, dtype=torch.float64)
        assert draw(torch.log_softmax(z, 0), seeded_generator(k), True) == \
            draw(torch.log_softmax(noisy, 0), seeded_generator(k), True)


@pytest.mark.parametrize("bad", [float("nan"), -math.inf])
def test_no_drawable_token_is_an_error(bad):
    logits = torch.full((4,), bad, dtype=torch.float64)
    with pytest.raises(ValueError, match="cannot draw a token"):
        draw(logits, seeded_generator(0), True)
