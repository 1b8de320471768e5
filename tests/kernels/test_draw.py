"""The seeded draw (inverse transform sampling on the CPU in float64) against hand computations
and its distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.kernels.draw import draw, seeded_generator, token_at


def test_the_token_is_the_first_whose_cumulative_probability_exceeds_u():
    logprobs = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    for seed in range(20):
        u = float(torch.rand((), generator=seeded_generator(seed), dtype=torch.float64))
        want = int(np.argmax(np.cumsum([0.1, 0.2, 0.3, 0.4]) > u))  # by hand
        assert draw(logprobs, seeded_generator(seed), True) == want


def test_one_uniform_number_per_draw():
    g, h = seeded_generator(3), seeded_generator(3)
    logprobs = torch.log_softmax(torch.randn(1000, dtype=torch.float64), 0)
    for _ in range(5):
        draw(logprobs, g, True)
        torch.rand((), generator=h, dtype=torch.float64)
    assert torch.equal(g.get_state(), h.get_state())


def test_frequencies_follow_the_distribution():
    p = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    logprobs = torch.log(torch.from_numpy(p)) + 3.0  # not normalised: the draw normalises
    g, n = seeded_generator(0), 20000
    counts = np.bincount([draw(logprobs, g, True) for _ in range(n)], minlength=5)
    sigma = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) < 4.5 * sigma), counts


def test_masked_tokens_are_never_drawn_at_either_end():
    logits = torch.full((7,), MASKED_LOGIT, dtype=torch.float64)
    logits[2], logits[4] = 0.0, 0.5
    g = seeded_generator(1)
    assert {draw(logits, g, True) for _ in range(300)} == {2, 4}
    assert draw(logits, g, False) == 4


def test_u_that_rounds_to_the_total_takes_the_last_positive_token():
    cumulative = torch.cumsum(torch.tensor([0.2, 0.3, 0.5, 0.0, 0.0], dtype=torch.float64), 0)
    assert token_at(cumulative, 1.0) == 2
    assert token_at(cumulative, 0.0) == 0
    assert token_at(cumulative, 0.2) == 1  # at a boundary: the next token (cumulative > u)
    assert token_at(cumulative, math.nextafter(1.0, 0.0)) == 2


@pytest.mark.parametrize("bad", [float("nan"), MASKED_LOGIT])
def test_no_drawable_token_is_an_error(bad):
    logits = torch.full((4,), bad, dtype=torch.float64)
    if bad == MASKED_LOGIT:
        logits[:] = -math.inf
    with pytest.raises(ValueError, match="cannot draw a token"):
        draw(logits, seeded_generator(0), True)
