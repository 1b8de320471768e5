"""The sampling operation every backend shares (``engine.generation.sample``), in-process: the
j-th response of a prompt is the one generated from seed + j, greedy at temperature 0, and the
EOS mask holds before the minimum length."""

from __future__ import annotations

import pytest

from ctxleak.engine.generation import generate_streams, sample
from ctxleak.engine.streams import single_stream


def test_response_j_is_seed_plus_j(tiny_lm):
    prompt = tiny_lm.encode("hello there")
    got = sample(tiny_lm, [prompt], [11], temperature=0.8, max_new_tokens=8, n=3)[0]
    for j, gen in enumerate(got):
        alone = generate_streams(tiny_lm, [prompt], single_stream(0.8), max_new_tokens=8,
                                 seed=11 + j)
        assert gen.token_ids == alone.token_ids


def test_temperature_zero_is_greedy_and_min_length_holds(tiny_lm):
    prompt = tiny_lm.encode("hello there")
    a, b = sample(tiny_lm, [prompt, prompt], [1, 2], temperature=0.0, max_new_tokens=6,
                  min_new_tokens=6)
    assert a[0].token_ids == b[0].token_ids  # greedy: the seed does not matter
    assert len(a[0].token_ids) == 6 and not a[0].stopped_on_eos


def test_bad_arguments():
    with pytest.raises(ValueError, match="temperature"):
        sample(None, [[1]], [1], temperature=-1, max_new_tokens=2)
    with pytest.raises(ValueError, match="one seed per prompt"):
        sample(None, [[1], [2]], [1], temperature=1, max_new_tokens=2)
