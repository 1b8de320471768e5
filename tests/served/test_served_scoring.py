"""Scoring through a real vLLM server equals ctxleak's in-process scoring: teacher-forced
log-probs of the demo's reference answers under the prompt with and without the context."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.vllm_server import prompt_logprobs

from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts

pytestmark = [pytest.mark.served, pytest.mark.integration]

TOL = 1e-4  # nats per token: float32 on both sides, different kernels


#: demo examples compared (of 20): enough tokens to tell a folder read wrongly, a third of the
#: time of all 20 (in-process scoring and the server's, both in this test)
EXAMPLES = 6


@pytest.fixture(scope="module")
def demo_pairs(default_lm):
    """(prompt, continuation) pairs: each of the first demo examples' prompt with and without its
    context (a summary and question examples both), its reference answer as the continuation."""
    pairs = []
    for ex in load_examples("demo", task="auto")[:EXAMPLES]:
        parts = example_parts(default_lm, ex, Setting.cid(1.0, 1.0), InfluenceOptions())[0]
        answer = default_lm.encode(ex.reference)
        pairs += [(parts.full, answer), (parts.empty, answer)]
    return pairs


@pytest.fixture(scope="module")
def in_process(default_lm, demo_pairs):
    return continuation_logprobs(default_lm, [p for p, _ in demo_pairs],
                                 [c for _, c in demo_pairs])


def test_raw_prompt_logprobs_equal_in_process(vllm_server, demo_pairs, in_process):
    """The server itself, asked with plain HTTP (no ctxleak client), serves the converted
    default model right: every token's log-prob within TOL of in-process (a folder read wrongly
    gives a uniform distribution, off by nats)."""
    seqs = [list(p) + list(c) for p, c in demo_pairs]
    served = prompt_logprobs(vllm_server, seqs)
    n_tokens = 0
    for (prompt, cont), row, ref in zip(demo_pairs, served, in_process):
        got = np.asarray(row[len(prompt) - 1:], dtype=np.float64)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
        n_tokens += len(cont)
    assert n_tokens > 100  # 6 reference answers, twice
