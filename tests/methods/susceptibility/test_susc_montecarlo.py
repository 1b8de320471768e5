"""Monte Carlo susceptibility (Du et al. 2024; SPEC §6): exact cases, bounds, duplicate weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxleak.engine.prompts import build_prompt
from ctxleak.engine.scoring import next_token_logprobs
from ctxleak.methods.susceptibility import montecarlo
from ctxleak.methods.susceptibility.contexts import dedupe_contexts, sample_contexts
from ctxleak.methods.susceptibility.montecarlo import (
    kl_rows,
    marginal_logprobs,
    monte_carlo_susceptibility,
    susceptibility_from_logprobs,
)


def _one_hot_logprobs(n: int, vocab: int) -> torch.Tensor:
    lp = torch.full((n, vocab), -math.inf, dtype=torch.float64)
    for i in range(n):
        lp[i, i] = 0.0
    return lp


def test_four_forcing_contexts_give_log4_exactly():
    res = susceptibility_from_logprobs(_one_hot_logprobs(4, 10), np.ones(4))
    assert res.chi == pytest.approx(math.log(4), abs=1e-15)
    np.testing.assert_allclose(res.psi, math.log(4), atol=1e-15)
    # the marginal is uniform over the four forced answers
    np.testing.assert_allclose(np.exp(res.ref_logprobs.numpy())[:4], 0.25)


def test_nearly_forcing_contexts_approach_log4():
    logits = torch.full((4, 50), 0.0, dtype=torch.float64)
    for i in range(4):
        logits[i, i] = 40.0  # p(forced answer) = 1 - 49·e^-40
    res = susceptibility_from_logprobs(torch.log_softmax(logits, -1), np.ones(4))
    assert res.chi == pytest.approx(math.log(4), abs=1e-12)


def test_identical_contexts_give_zero():
    lp = torch.log_softmax(torch.randn(1, 30, dtype=torch.float64), -1).repeat(5, 1)
    assert susceptibility_from_logprobs(lp, np.ones(5)).chi == pytest.approx(0.0, abs=1e-14)


def test_four_forcing_contexts_through_the_scorer(tiny_lm, monkeypatch):
    """The whole path (prompts c + q, scoring, reference) with a scorer that forces the answer
    named in each context: χ = log 4 and every persuasion score ψ = log 4."""
    answers = ["paris", "rome", "berlin", "madrid"]
    answer_ids = [tiny_lm.encode(a)[0] for a in answers]
    seen = {}

    def forcing_scorer(lm, prompts, **kwargs):
        seen["reuse_prefix"] = kwargs.get("reuse_prefix")
        out = torch.full((len(prompts), lm.vocab_size), -math.inf, dtype=torch.float64)
        for row, ids in enumerate(prompts):
            hits = [a for a in answer_ids if a in ids]
            assert len(hits) == 1  # each prompt holds its own context's answer
            out[row, hits[0]] = 0.0
        return out

    monkeypatch.setattr(montecarlo, "next_token_logprobs", forcing_scorer)
    contexts = [f"the capital of france is {a} ." for a in answers]
    res = monte_carlo_susceptibility(tiny_lm, "the capital of france is", contexts)
    assert res.chi == pytest.approx(math.log(4), abs=1e-15)
    np.testing.assert_allclose(res.psi, math.log(4), atol=1e-15)
    assert seen["reuse_prefix"] is True


def test_scorer_path_matches_direct_computation(tiny_lm):
    """With the real tiny model: the prompts are context ids followed by query ids, and χ is the
    weighted KL from the weighted marginal, computed here by hand from separate forward passes."""
    query = "the capital of france is"
    contexts = ["paris is the capital of france .", "rome is the capital of italy .",
                "the doctor said no ."]
    weights = np.array([3.0, 1.0, 2.0])
    res = monte_carlo_susceptibility(tiny_lm, query, contexts, weights, reuse_prefix=False)
    rows = []
    for c in contexts:
        ids = list(tiny_lm.bos_ids) + tiny_lm.encode(c) + tiny_lm.encode(query)
        assert build_prompt(tiny_lm, "{context}{query}", {"context": c, "query": query}).ids \
            == tuple(ids)
        rows.append(next_token_logprobs(tiny_lm, [ids])[0])
    lp = torch.stack(rows)
    w = weights / weights.sum()
    p = lp.exp()
    pbar = (torch.as_tensor(w)[:, None] * p).sum(0)
    kl = (p * (lp - pbar.log())).sum(1)
    assert res.chi == pytest.approx(float((torch.as_tensor(w) * kl).sum()), rel=1e-6, abs=1e-12)
    np.testing.assert_allclose(res.psi, kl.numpy(), rtol=1e-6, atol=1e-12)


def test_no_context_reference(tiny_lm):
    query = "the capital of france is"
    contexts = ["paris is the capital of france .", "rome is the capital of italy ."]
    res = monte_carlo_susceptibility(tiny_lm, query, contexts, reference="no-context",
                                     reuse_prefix=False)
    assert res.reference == "no-context"
    empty = build_prompt(tiny_lm, "{context}{query}", {"context": "", "query": query}).ids
    ref = next_token_logprobs(tiny_lm, [empty])[0]
    torch.testing.assert_close(res.ref_logprobs, ref, rtol=1e-6, atol=1e-9)
    full = monte_carlo_susceptibility(tiny_lm, query, contexts, reuse_prefix=False)
    # the marginal minimises Σ w·KL(p_c ‖ q) over q, so the no-context value is never smaller
    assert res.chi >= full.chi - 1e-12


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(1, 8), vocab=st.integers(2, 12), scale=st.floats(0.1, 30.0),
       seed=st.integers(0, 2**31 - 1), uniform=st.booleans())
def test_chi_is_between_zero_and_log_contexts(n, vocab, scale, seed, uniform):
    """χ is a mutual information: 0 ≤ χ ≤ H(p̂) ≤ log(number of distinct contexts)."""
    rng = np.random.default_rng(seed)
    lp = torch.log_softmax(torch.as_tensor(rng.normal(size=(n, vocab)) * scale), -1)
    w = np.ones(n) if uniform else rng.uniform(0.01, 1.0, size=n)
    res = susceptibility_from_logprobs(lp, w)
    wn = w / w.sum()
    entropy = float(-(wn * np.log(wn)).sum())
    assert -1e-12 <= res.chi <= entropy + 1e-9
    assert res.chi <= math.log(n) + 1e-9
    assert (res.psi >= 0).all()
    # any other reference gives a larger weighted divergence (the marginal is the minimiser)
    other = torch.log_softmax(torch.as_tensor(rng.normal(size=vocab)), -1)
    assert susceptibility_from_logprobs(lp, w, reference_logprobs=other).chi >= res.chi - 1e-9


def test_duplicates_are_counted_by_their_weight():
    a = torch.log_softmax(torch.tensor([3.0, 0.0, -1.0, 0.5], dtype=torch.float64), -1)
    b = torch.log_softmax(torch.tensor([-2.0, 2.0, 0.0, 0.0], dtype=torch.float64), -1)
    drawn = ["A", "B", "A", "A"]
    sample = dedupe_contexts(drawn)
    assert sample.texts == ["A", "B"] and sample.counts.tolist() == [3.0, 1.0]
    np.testing.assert_allclose(sample.weights, [0.75, 0.25])
    rows = {"A": a, "B": b}
    deduped = susceptibility_from_logprobs(torch.stack([rows[t] for t in sample.texts]),
                                           sample.counts)
    every_draw = susceptibility_from_logprobs(torch.stack([rows[t] for t in drawn]),
                                              np.ones(len(drawn)))
    assert deduped.chi == pytest.approx(every_draw.chi, rel=1e-12)
    # and it differs from treating the distinct contexts as equally likely
    assert susceptibility_from_logprobs(torch.stack([a, b]), np.ones(2)).chi != \
        pytest.approx(deduped.chi, rel=1e-3)


def test_duplicate_contexts_through_the_model(tiny_lm):
    query = "the capital of france is"
    a, b = "paris is the capital .", "rome is the capital ."
    once = monte_carlo_susceptibility(tiny_lm, query, [a, b], [2, 1], reuse_prefix=False)
    listed = monte_carlo_susceptibility(tiny_lm, query, [a, a, b], reuse_prefix=False)
    assert once.chi == pytest.approx(listed.chi, rel=1e-6, abs=1e-12)


def test_sampling_with_and_without_replacement():
    pool = [f"c{i}" for i in range(5)]
    s = sample_contexts(pool, 40, np.random.default_rng(0), replace=True)
    assert s.n_draws == 40 and len(s.texts) <= 5 and set(s.texts) <= set(pool)
    s2 = sample_contexts(pool, 40, np.random.default_rng(0), replace=True)
    assert s.texts == s2.texts and s.counts.tolist() == s2.counts.tolist()  # seeded
    u = sample_contexts(pool, 3, np.random.default_rng(1), replace=False)
    assert len(u.texts) == 3 and u.counts.tolist() == [1.0, 1.0, 1.0]
    capped = sample_contexts(pool, 40, np.random.default_rng(1))  # default: no replacement
    assert sorted(capped.texts) == pool and capped.n_draws == 5


def test_kl_rows_handles_zeros():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64))
    logq = torch.log(torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64))
    assert float(kl_rows(logp, logq)[0]) == pytest.approx(math.log(2))
    # q rules out a token p uses: infinite divergence
    assert math.isinf(float(kl_rows(logq[None], logp[0])[0]))
    m = marginal_logprobs(torch.stack([logp[0], logq]), [1.0, 1.0])
    torch.testing.assert_close(m.exp(), torch.tensor([0.375, 0.375, 0.25], dtype=torch.float64))


def test_bad_weights():
    lp = torch.log_softmax(torch.randn(2, 4, dtype=torch.float64), -1)
    with pytest.raises(ValueError):
        susceptibility_from_logprobs(lp, [1.0])
    with pytest.raises(ValueError):
        susceptibility_from_logprobs(lp, [-1.0, 2.0])


def test_context_longer_than_the_window_is_cut_keeping_query_and_context_start(tiny_lm):
    """A context longer than the model's window (256 tokens here) is cut from its end so that
    prompt = BOS + first tokens of the context + the whole query fills the window exactly; the
    result equals scoring that prompt by hand, and the cut is reported per context."""
    query = "the capital of france is"
    long_context = "paris is the capital of france . " * 60  # about 420 tokens
    short = "rome is in italy ."
    window = tiny_lm.max_length
    q_ids, c_ids = tiny_lm.encode(query), tiny_lm.encode(long_context)
    assert len(c_ids) + len(q_ids) > window
    res = monte_carlo_susceptibility(tiny_lm, query, [long_context, short], reuse_prefix=False)
    keep = window - len(tiny_lm.bos_ids) - len(q_ids)
    assert res.context_tokens_cut == (len(c_ids) - keep, 0)
    ids = list(tiny_lm.bos_ids) + c_ids[:keep] + q_ids
    assert len(ids) == window
    by_hand = next_token_logprobs(tiny_lm, [ids, list(tiny_lm.bos_ids) + tiny_lm.encode(short)
                                            + q_ids])
    direct = susceptibility_from_logprobs(by_hand, [1.0, 1.0])
    assert res.chi == pytest.approx(direct.chi, rel=1e-6, abs=1e-12)
    prompts, cut = montecarlo.fitted_context_prompts(tiny_lm, query, [long_context])
    assert prompts[0] == tuple(ids) and cut == [len(c_ids) - keep]
