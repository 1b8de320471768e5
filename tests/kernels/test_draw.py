"""The seeded draw: its hash against a numpy reimplementation, its distribution, masked tokens,
its errors, that float noise between two engines' logits leaves its tokens alone, and (where a
GPU is present) that a GPU draws the same tokens as the CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import naive_draw as naive
from scipy import stats

from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.kernels.draw import draw, mix32, seeded_generator, uniforms


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


def test_the_hash_by_hand_and_against_numpy():
    # mix32(1) by hand: 1 ^ (1 >> 16) = 1; 1 * 0x7FEB352D = 0x7FEB352D;
    # 0x7FEB352D ^ (0x7FEB352D >> 15) = 0x7FEB352D ^ 0xFFD6 = 0x7FEBCAFB;
    # 0x7FEBCAFB * 0x5BD1E995 mod 2**32, then x ^ (x >> 16)
    x = (0x7FEBCAFB * 0x5BD1E995) % 2**32
    assert int(mix32(torch.tensor([1]))) == x ^ (x >> 16)
    values = torch.tensor([0, 1, 2**31, 2**32 - 1, 123456789, 0xDEADBEEF])
    assert mix32(values).tolist() == naive.mix32(values.numpy()).astype(np.int64).tolist()
    for keys, n in [((0, 0), 1), ((2**32 - 1, 7), 5), ((12345, 2**32 - 1), 1000)]:
        assert np.array_equal(uniforms(keys, n).numpy(), naive.uniforms(keys, n)), (keys, n)


def test_uniforms_are_uniform_and_each_key_gives_its_own():
    u = uniforms((1, 2), 200_000)
    assert 0.0 < float(u.min()) and float(u.max()) < 1.0
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3
    others = [uniforms(keys, 200_000).numpy() for keys in [(1, 3), (2, 2)]]
    for other in others:  # another key: other numbers, uncorrelated with these
        assert abs(np.corrcoef(u.numpy(), other)[0, 1]) < 0.02


@pytest.mark.parametrize("keys, n", [((0, 2**32), 4), ((-1, 0), 4), ((0, 0), 0)])
def test_bad_hash_arguments_are_refused(keys, n):
    with pytest.raises(ValueError):
        uniforms(keys, n)


def test_the_draw_equals_a_numpy_reimplementation():
    logprobs = torch.log_softmax(3 * torch.randn(2000, dtype=torch.float64), 0)
    mine, theirs = seeded_generator(3), seeded_generator(3)
    drawn = [draw(logprobs, mine, True) for _ in range(50)]
    assert drawn == [naive.naive_draw(logprobs, theirs) for _ in range(50)]
    assert len(set(drawn)) > 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_draws_the_tokens_of_the_cpu():
    """Integer hashing is exact on every device: the same uniforms bit for bit, and the same
    tokens from log-probabilities on the GPU as from the same values on the CPU."""
    for n in (49152, 128256):
        assert torch.equal(uniforms((7, 9), n, "cuda").cpu(), uniforms((7, 9), n))
    g = torch.Generator().manual_seed(0)
    rows = torch.log_softmax(2.5 * torch.randn(200, 49152, generator=g, dtype=torch.float64), -1)
    on_cpu = [draw(row, seeded_generator(k), True) for k, row in enumerate(rows)]
    on_gpu = [draw(row.cuda(), seeded_generator(k), True) for k, row in enumerate(rows)]
    assert on_cpu == on_gpu
