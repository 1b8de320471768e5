"""White-box probing (ProPILE App. A.4): soft-prompt training with a frozen model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tiny_data import word_records

from ctxleak.methods.pii.metrics import exact_match
from ctxleak.methods.pii.probe import encode_item, make_items
from ctxleak.methods.pii.softprompt import (
    SoftPromptConfig,
    soft_prompt_greedy,
    soft_prompt_logprobs,
    train_soft_prompt,
)


def _pairs(lm, n=6):
    items, _ = make_items(word_records(n), ["phone"], first_template_only=True)
    enc = [encode_item(lm, it) for it in items]
    return items, [e.prompt for e in enc], [e.target for e in enc]


def test_training_lowers_nll_and_leaves_weights_alone(tiny_lm):
    items, prompts, targets = _pairs(tiny_lm)
    before = {k: v.detach().clone() for k, v in tiny_lm.model.state_dict().items()}
    flags = [p.requires_grad for p in tiny_lm.model.parameters()]

    def em(gens):
        return float(np.mean([exact_match(it.target, tiny_lm.decode(g))
                              for it, g in zip(items, gens)]))

    result = train_soft_prompt(tiny_lm, prompts, targets,
                               SoftPromptConfig(n_tokens=4, epochs=15, lr=0.05, seed=0),
                               exact_match=em, max_new_tokens=3)
    after = tiny_lm.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [p.requires_grad for p in tiny_lm.model.parameters()] == flags
    assert result.embeddings.shape == (4, tiny_lm.model.config.hidden_size)
    history = {h["epoch"]: h for h in result.history}
    assert result.initial_nll == history[0]["train_nll"]
    final = -np.mean([lp.sum() for lp in soft_prompt_logprobs(
        tiny_lm, result.embeddings, prompts, targets)])
    # the tiny GPT-2's tied head keeps its distributions near uniform, so it moves less
    assert final < result.initial_nll - (0.5 if tiny_lm.bos_ids else 0.02)
    # the kept soft prompt is the best epoch by exact match, ties broken by the lower NLL
    best = history[result.best_epoch]
    assert best["exact_match"] == max(h["exact_match"] for h in result.history)
    assert final == pytest.approx(best["train_nll"], abs=1e-6)


def test_soft_prompt_logprobs_match_a_naive_forward(llama_lm):
    _, prompts, targets = _pairs(llama_lm, 3)
    soft = torch.randn(3, llama_lm.model.config.hidden_size, generator=torch.Generator()
                       .manual_seed(0))
    got = soft_prompt_logprobs(llama_lm, soft, prompts, targets, batch_size=2)
    emb = llama_lm.model.get_input_embeddings()
    for p, t, lp in zip(prompts, targets, got):
        ids = torch.tensor(list(p) + list(t))
        k = len(llama_lm.bos_ids)
        seq = torch.cat([emb(ids[:k]), soft, emb(ids[k:])])[None]
        with torch.no_grad():
            logp = torch.log_softmax(llama_lm.model(inputs_embeds=seq).logits[0].double(), -1)
        start = seq.shape[1] - len(t)
        naive = [float(logp[start - 1 + r, tok]) for r, tok in enumerate(t)]
        assert lp == pytest.approx(naive, abs=1e-5)


def test_greedy_with_soft_prompt_is_batch_invariant(tiny_lm):
    _, prompts, _ = _pairs(tiny_lm, 4)
    soft = torch.randn(2, tiny_lm.model.config.hidden_size, generator=torch.Generator()
                       .manual_seed(1))
    batched = soft_prompt_greedy(tiny_lm, soft, prompts, max_new_tokens=4, batch_size=4)
    single = [soft_prompt_greedy(tiny_lm, soft, [p], max_new_tokens=4)[0] for p in prompts]
    assert batched == single


def test_config_and_input_errors(tiny_lm):
    with pytest.raises(ValueError, match="at least 1 vector"):
        SoftPromptConfig(n_tokens=0).validate()
    with pytest.raises(ValueError, match="epochs"):
        SoftPromptConfig(epochs=0).validate()
    with pytest.raises(ValueError, match="non-empty target"):
        train_soft_prompt(tiny_lm, [[1, 5]], [[]])
