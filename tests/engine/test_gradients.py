"""Embedding gradients against loops and finite differences."""

from __future__ import annotations

import pytest
import torch

from ctxleak.engine.gradients import (
    frozen_weights,
    input_embeddings,
    next_token_embedding_grads,
    next_token_log_distribution,
)


def test_batched_equals_loop(tiny_lm):
    prompt = tiny_lm.encode("the capital of france is paris . the capital of italy is")
    a = next_token_embedding_grads(tiny_lm, prompt, (2, 6), top_k=5, batched=True)
    b = next_token_embedding_grads(tiny_lm, prompt, (2, 6), top_k=5, batched=False)
    assert a.grads.shape == (5, 4, tiny_lm.model.config.hidden_size if hasattr(
        tiny_lm.model.config, "hidden_size") else tiny_lm.model.config.n_embd)
    torch.testing.assert_close(a.grads, b.grads, atol=1e-6, rtol=1e-5)
    assert torch.equal(a.token_ids, b.token_ids)
    # the chosen tokens are the top-k of the distribution
    assert torch.equal(a.token_ids, torch.topk(a.full_logprobs, 5).indices)


def test_gradient_matches_finite_difference(tiny_lm):
    torch.manual_seed(0)
    prompt = tiny_lm.encode("the doctor said the patient")
    model = tiny_lm.model.double()  # float64 so the finite difference is accurate
    try:
        res = next_token_embedding_grads(tiny_lm, prompt, (1, 3), token_ids=[5, 9])
        base = input_embeddings(tiny_lm, prompt).detach()
        direction = torch.randn(2, base.shape[1], dtype=torch.float64)
        h = 1e-4  # central difference; float32 RMSNorm limits smaller steps
        plus, minus = base.clone(), base.clone()
        plus[1:3] += h * direction
        minus[1:3] -= h * direction
        with torch.no_grad():
            fd = (next_token_log_distribution(tiny_lm, plus)
                  - next_token_log_distribution(tiny_lm, minus)) / (2 * h)
    finally:
        model.float()
    for j, tok in enumerate([5, 9]):
        analytic = float((res.grads[j] * direction).sum())
        assert analytic == pytest.approx(float(fd[tok]), rel=1e-4, abs=1e-6)


def test_bad_span(tiny_lm):
    with pytest.raises(ValueError):
        next_token_embedding_grads(tiny_lm, [4, 5], (1, 5))


def test_frozen_weights_restores_flags_even_after_an_error(tiny_lm):
    params = list(tiny_lm.model.parameters())
    before = [p.requires_grad for p in params]
    with pytest.raises(RuntimeError), frozen_weights(tiny_lm.model):
        assert not any(p.requires_grad for p in params)
        raise RuntimeError("boom")
    assert [p.requires_grad for p in params] == before


def test_cached_prefix_gives_the_same_gradients(tiny_lm):
    """The positions before the span as a KV cache (no graph): same tokens, log-probs and
    gradients as with the whole prompt in the graph; a shared store gives them again."""
    from ctxleak.engine.forward import PrefixKV

    prompt = tiny_lm.bos_ids + tiny_lm.encode("the doctor said the capital of france is")
    span = (4, 8)
    whole = next_token_embedding_grads(tiny_lm, prompt, span, top_k=4)
    store = PrefixKV(tiny_lm)
    for kw in ({"cache_prefix": True}, {"prefix_kv": store}, {"prefix_kv": store}):
        cached = next_token_embedding_grads(tiny_lm, prompt, span, top_k=4, **kw)
        assert torch.equal(cached.token_ids, whole.token_ids)
        assert torch.allclose(cached.full_logprobs, whole.full_logprobs, atol=1e-5)
        assert torch.allclose(cached.grads, whole.grads, rtol=1e-4, atol=1e-6)
    assert store.hits == 1
