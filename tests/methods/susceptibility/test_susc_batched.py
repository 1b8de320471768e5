"""Susceptibility across queries (issue 13): Fisher's forward passes and vector-Jacobian
products of several queries in one batch, and Monte Carlo prompts of several queries in one
planner run, give each query's own numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.tiny_data import TINY_RELATIONS

import ctxleak
from ctxleak.engine.gradients import next_token_embedding_grads, next_token_embedding_grads_many
from ctxleak.methods.susceptibility.fisher import fisher_susceptibility, fisher_susceptibility_many
from ctxleak.methods.susceptibility.montecarlo import monte_carlo_many, monte_carlo_susceptibility

QUERIES = ["the capital of france is", "rome is", "the doctor said the news report was"]


@pytest.mark.parametrize("template", ["{context}{query}", "the city . the news : {context}{query}"])
def test_fisher_many_equals_one_query_at_a_time(tiny_lm, template):
    many = fisher_susceptibility_many(tiny_lm, QUERIES, template=template, top_k=4)
    for query, got in zip(QUERIES, many):
        alone = fisher_susceptibility(tiny_lm, query, template=template, top_k=4)
        assert got.token_ids == alone.token_ids
        assert got.n_query_tokens == alone.n_query_tokens
        assert got.chi == pytest.approx(alone.chi, rel=1e-5)
        assert got.sq_norms == pytest.approx(alone.sq_norms, rel=1e-5)


def test_batched_gradients_equal_single_prompt_gradients(llama_lm):
    """Row independence: each prompt's gradients in a padded batch (different lengths, one
    group with a shared prefix and one without) are its own."""
    enc = llama_lm.encode
    head = llama_lm.bos_ids + enc("the city .")
    prompts = [head + enc("the capital of france is"), head + enc("rome is a"),
               enc("paris is the capital of"), llama_lm.bos_ids + enc("berlin")]
    spans = [(len(head), len(prompts[0])), (len(head), len(prompts[1]) - 1),
             (0, len(prompts[2])), (1, 2)]
    many = next_token_embedding_grads_many(llama_lm, prompts, spans, top_k=3)
    for prompt, span, got in zip(prompts, spans, many):
        alone = next_token_embedding_grads(llama_lm, prompt, span, top_k=3, cache_prefix=True)
        assert got.token_ids.tolist() == alone.token_ids.tolist()
        np.testing.assert_allclose(got.logprobs, alone.logprobs, atol=1e-6)
        np.testing.assert_allclose(got.grads, alone.grads, atol=1e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="span"):
        next_token_embedding_grads_many(llama_lm, [[1, 2]], [(1, 3)])


@pytest.mark.parametrize("reference", ["marginal", "no-context"])
def test_monte_carlo_many_equals_one_query_at_a_time(tiny_lm, reference):
    jobs = [(QUERIES[0], ["paris is the capital .", "rome is a city ."], [3, 1]),
            (QUERIES[1], ["the doctor said", "berlin is in germany .", "the news"], None)]
    many = monte_carlo_many(tiny_lm, jobs, reference=reference)
    for (query, contexts, weights), got in zip(jobs, many):
        alone = monte_carlo_susceptibility(tiny_lm, query, contexts, weights,
                                           reference=reference)
        assert got.chi == pytest.approx(alone.chi, rel=1e-6, abs=1e-9)
        np.testing.assert_allclose(got.psi, alone.psi, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(got.weights, alone.weights)
    assert monte_carlo_many(tiny_lm, []) == []
    with pytest.raises(ValueError, match="context"):
        monte_carlo_many(tiny_lm, [(QUERIES[0], [], None)])


def test_run_records_do_not_depend_on_the_batch(tiny_dir, tmp_path):
    (tmp_path / "rel.json").write_text(json.dumps(TINY_RELATIONS))
    rows = {}
    for size in (1, 4):
        out = tmp_path / f"b{size}"
        ctxleak.susceptibility(tiny_dir, str(tmp_path / "rel.json"), contexts=4, limit=5,
                               batch_size=size, seed=3, output=str(out), progress=False)
        rows[size] = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows[4]] == [r["id"] for r in rows[1]]
    for a, b in zip(rows[1], rows[4]):
        assert b["chi_f"] == pytest.approx(a["chi_f"], rel=1e-5)
        assert b["chi_mc"] == pytest.approx(a["chi_mc"], rel=1e-5, abs=1e-9)
        assert [c["context"] for c in b["persuasive_contexts"]] == \
            [c["context"] for c in a["persuasive_contexts"]]
