"""Integration: the engine on the real default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxleak.engine.generation import generate_streams, single_stream
from ctxleak.engine.scoring import continuation_logprobs, next_token_logprobs

pytestmark = pytest.mark.integration


def test_load_score_generate(default_lm):
    lm = default_lm
    assert lm.info.name == "default" and lm.info.file_sha256 and lm.vocab_size == 49152
    prompt = lm.encode("The capital of France is")
    logp = next_token_logprobs(lm, [prompt])[0]
    assert lm.decode([int(logp.argmax())]).strip() == "Paris"
    assert float(torch.logsumexp(logp, 0)) == pytest.approx(0.0, abs=1e-9)
    out = generate_streams(lm, [prompt], single_stream(0.8), max_new_tokens=6, seed=1)
    again = generate_streams(lm, [prompt], single_stream(0.8), max_new_tokens=6, seed=1,
                             use_cache=False)
    assert out.token_ids == again.token_ids and len(out.token_ids) > 0


def test_batch_size_invariance(default_lm):
    lm = default_lm
    prompts = [lm.encode(t) for t in ("Hello there", "The quick brown fox jumps over the lazy",
                                      "A", "Privacy matters because")]
    cont = lm.encode(" and then it ended.")
    a = continuation_logprobs(lm, prompts, cont, batch_size=1, reuse_prefix=False)
    b = continuation_logprobs(lm, prompts, cont, batch_size=4, reuse_prefix=False)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-4)
