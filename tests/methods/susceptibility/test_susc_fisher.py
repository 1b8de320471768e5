"""Fisher susceptibility (paper 002 Eq. 10-11, SPEC §6 reading): batched against looped
gradients, the exact trace, and the Taylor check E_δ KL(p(·|e) ‖ p(·|e+δ)) → ½σ²·tr I(e)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.tiny_models import tiny_gpt2, tiny_llama

from ctxleak.engine.forward import PrefixKV
from ctxleak.engine.gradients import input_embeddings, next_token_log_distribution
from ctxleak.methods.susceptibility.fisher import (
    fisher_susceptibility,
    fisher_trace,
    full_vocab_trace,
    query_prompt,
)

QUERY = "the capital of france is"


def _float64(make, seed):
    """A fresh tiny model in float64 (the session fixtures stay float32)."""
    lm = make(seed=seed)
    lm.model.double()
    return lm


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def lm64(request):
    return _float64(tiny_llama, 5) if request.param == "llama" else _float64(tiny_gpt2, 6)


def test_batched_equals_loop_over_topk(tiny_lm):
    batched = fisher_susceptibility(tiny_lm, QUERY, top_k=10, batched=True)
    looped = fisher_susceptibility(tiny_lm, QUERY, top_k=10, batched=False)
    assert batched.token_ids == looped.token_ids and len(batched.token_ids) == 10
    assert batched.chi == pytest.approx(looped.chi, rel=1e-5)
    assert batched.sq_norms == pytest.approx(looped.sq_norms, rel=1e-5)


def test_chi_is_half_sigma2_times_the_weighted_squared_norms(tiny_lm):
    res = fisher_susceptibility(tiny_lm, QUERY, top_k=5, sigma2=1.0, truncation="raw")
    manual = sum(p * s for p, s in zip(res.probs, res.sq_norms))
    assert res.trace == pytest.approx(manual, rel=1e-12)
    assert res.chi == pytest.approx(0.5 * manual, rel=1e-12)
    # probabilities are those of the top-5 tokens, largest first
    assert res.probs == sorted(res.probs, reverse=True) and 0 < res.mass <= 1
    scaled = fisher_susceptibility(tiny_lm, QUERY, top_k=5, sigma2=0.25, truncation="raw")
    assert scaled.chi == pytest.approx(0.25 * res.chi, rel=1e-6)
    prompt = query_prompt(tiny_lm, QUERY)
    assert res.n_query_tokens == prompt.spans["query"][1] - prompt.spans["query"][0]


def test_fisher_trace_helper():
    logp = torch.log(torch.tensor([0.5, 0.25], dtype=torch.float64))
    grads = torch.tensor([[[1.0, 2.0]], [[0.0, 4.0]]], dtype=torch.float64)
    trace, sq = fisher_trace(logp, grads, "raw")
    assert sq.tolist() == [5.0, 16.0] and trace == pytest.approx(0.5 * 5 + 0.25 * 16)
    # renormalised: p̃ = (2/3, 1/3), ḡ = (2/3, 8/3), g − ḡ = (1/3, −2/3) and (−2/3, 4/3)
    trace, sq = fisher_trace(logp, grads)
    assert sq.tolist() == pytest.approx([5 / 9, 20 / 9])
    assert trace == pytest.approx(2 / 3 * 5 / 9 + 1 / 3 * 20 / 9)


def test_renormalised_truncation_is_the_fisher_of_the_topk_distribution(lm64):
    """With the top-k distribution renormalised, tr I is Σ p̃(a)·‖∇_e log p̃(a)‖² where
    log p̃ = log p − logsumexp_top-k log p, differentiated by autograd; over the whole vocabulary
    it is the full trace (the score has mean zero), and so is the raw sum."""
    res = fisher_susceptibility(lm64, QUERY, top_k=6)
    assert res.truncation == "renormalised"
    prompt = query_prompt(lm64, QUERY)
    start, end = prompt.spans["query"]
    with torch.no_grad():
        base = input_embeddings(lm64, prompt.ids)
    wrt = base[start:end].clone().requires_grad_(True)
    logp = next_token_log_distribution(lm64, torch.cat([base[:start], wrt, base[end:]]))
    top = logp[torch.as_tensor(res.token_ids)]
    renorm = top - torch.logsumexp(top, dim=0)
    manual = 0.0
    for j in range(len(res.token_ids)):
        (g,) = torch.autograd.grad(renorm[j], wrt, retain_graph=True)
        manual += float(renorm[j].detach().exp()) * float((g.double() ** 2).sum())
    assert res.trace == pytest.approx(manual, rel=1e-4)
    raw = fisher_susceptibility(lm64, QUERY, top_k=6, truncation="raw")
    assert raw.trace != pytest.approx(res.trace, rel=1e-3)
    full = fisher_susceptibility(lm64, QUERY, vocab="full")
    every = fisher_susceptibility(lm64, QUERY, top_k=lm64.vocab_size)
    assert every.trace == pytest.approx(full.trace, rel=1e-6)
    with pytest.raises(ValueError, match="truncation"):
        fisher_susceptibility(lm64, QUERY, truncation="clipped")


def test_topk_over_the_whole_vocabulary_is_the_full_trace(lm64):
    full = fisher_susceptibility(lm64, QUERY, vocab="full")
    every = fisher_susceptibility(lm64, QUERY, top_k=lm64.vocab_size, truncation="raw")
    assert full.mass == pytest.approx(1.0, abs=1e-12)
    assert every.chi == pytest.approx(full.chi, rel=1e-9)
    top10 = fisher_susceptibility(lm64, QUERY, top_k=10, truncation="raw")
    assert top10.chi <= full.chi * (1 + 1e-12)  # a partial sum of non-negative terms


def test_full_trace_equals_the_jacobian_closed_form(lm64):
    """tr I = Σ_a p_a ‖J_a − Σ_b p_b J_b‖², J = ∂ logits / ∂ e, from an explicit Jacobian."""
    prompt = query_prompt(lm64, QUERY)
    s, e = prompt.spans["query"]
    base = input_embeddings(lm64, prompt.ids).detach()

    def logits(wrt):
        embeds = torch.cat([base[:s], wrt, base[e:]], dim=0)
        return next_token_log_distribution(lm64, embeds)  # log-softmax: J of log p directly

    jac = torch.autograd.functional.jacobian(logits, base[s:e].clone())  # [V, n, d]
    logp = logits(base[s:e]).detach()
    g = jac.reshape(jac.shape[0], -1)
    expected = float((logp.exp() * (g * g).sum(1)).sum())
    trace, mass = full_vocab_trace(lm64, prompt.ids, (s, e), chunk=7)  # uneven chunks
    assert trace == pytest.approx(expected, rel=1e-9)
    assert mass == pytest.approx(1.0, abs=1e-12)


def test_expected_kl_of_a_small_perturbation_approaches_half_sigma2_trace(lm64):
    """SPEC §6 validation. For δ ~ N(0, σ²I) on the query embeddings,
    KL(p(·|e) ‖ p(·|e+δ)) = ½·δᵀI(e)δ + O(σ³) (the first-order term vanishes because
    Σ_a p_a ∇ log p_a = 0), so E_δ KL = ½σ²·tr I(e) + O(σ⁴) with the trace over the full
    vocabulary. Tolerance: at σ = 1e-4 the O(σ⁴) bias is below 1e-4 relative (measured: -0.8% at
    σ = 1e-3, i.e. ∝ σ²), so the error is the Monte Carlo error of the mean of 3000 draws;
    we allow 4 standard errors (about 2.8% here), estimated from the same draws."""
    prompt = query_prompt(lm64, QUERY)
    s, e = prompt.spans["query"]
    base = input_embeddings(lm64, prompt.ids).detach()
    trace = fisher_susceptibility(lm64, QUERY, vocab="full").trace
    gen = torch.Generator().manual_seed(0)
    model = lm64.model

    def mean_kl(sigma: float, n: int = 3000, batch: int = 500) -> tuple[float, float]:
        kls = []
        with torch.no_grad():
            lp0 = torch.log_softmax(model(inputs_embeds=base[None]).logits[0, -1].double(), -1)
            for _ in range(n // batch):
                delta = torch.randn(batch, e - s, base.shape[1], generator=gen,
                                    dtype=torch.float64) * sigma
                embeds = base[None].repeat(batch, 1, 1)
                embeds[:, s:e] += delta
                lp = torch.log_softmax(model(inputs_embeds=embeds).logits[:, -1].double(), -1)
                kls.append((lp0.exp() * (lp0 - lp)).sum(-1))
        kl = torch.cat(kls)
        return float(kl.mean()), float(kl.std()) / math.sqrt(kl.numel())

    sigma = 1e-4
    target = 0.5 * sigma ** 2 * trace
    mean, se = mean_kl(sigma)
    assert abs(mean - target) <= 4 * se + 1e-4 * target, (mean, target, se)
    # and it is an approach: at a large σ the quadratic approximation is visibly off
    big = 3e-2
    mean_big, se_big = mean_kl(big, n=1000)
    assert abs(mean_big / (0.5 * big ** 2 * trace) - 1) > abs(mean / target - 1)


def test_bad_arguments(tiny_lm):
    with pytest.raises(ValueError):
        fisher_susceptibility(tiny_lm, QUERY, vocab="some")
    with pytest.raises(ValueError):
        fisher_susceptibility(tiny_lm, QUERY, sigma2=0.0)
    with pytest.raises(ValueError):
        fisher_susceptibility(tiny_lm, QUERY, top_k=0)
    with pytest.raises(ValueError):
        fisher_susceptibility(tiny_lm, "")


@pytest.mark.parametrize("template", ["{context}{query}", "the doctor said : {context}{query}"])
def test_prefix_cache_gives_the_engine_gradients(tiny_lm, template):
    """Running the tokens before the query as a KV cache (no graph) changes nothing but speed."""
    cached = fisher_susceptibility(tiny_lm, QUERY, top_k=6, template=template, reuse_prefix=True)
    engine = fisher_susceptibility(tiny_lm, QUERY, top_k=6, template=template, reuse_prefix=False)
    assert cached.token_ids == engine.token_ids
    assert cached.probs == pytest.approx(engine.probs, rel=1e-5)
    assert cached.sq_norms == pytest.approx(engine.sq_norms, rel=1e-4)
    looped = fisher_susceptibility(tiny_lm, QUERY, top_k=6, template=template, batched=False)
    assert looped.sq_norms == pytest.approx(cached.sq_norms, rel=1e-5)


def test_a_shared_prefix_store_changes_nothing_across_queries(tiny_lm):
    """One PrefixKV store for every query of a run: the prefix goes through the model once,
    and each query's χ_F is the one computed without the store (the store's copies are not
    changed by the queries that extend them)."""
    template = "the doctor said : {context}{query}"
    store = PrefixKV(tiny_lm)
    queries = [QUERY, "the capital of italy is", QUERY]
    shared = [fisher_susceptibility(tiny_lm, q, top_k=5, template=template, prefix_kv=store)
              for q in queries]
    alone = [fisher_susceptibility(tiny_lm, q, top_k=5, template=template) for q in queries]
    assert store.hits == 2
    for a, b in zip(shared, alone):
        assert a.token_ids == b.token_ids and a.chi == pytest.approx(b.chi, rel=1e-9)
    assert shared[0].chi == shared[2].chi


def test_weights_stay_as_they_were(tiny_lm):
    """Fisher freezes the weights while it runs (faster backward) and gives them back."""
    params = list(tiny_lm.model.parameters())
    params[0].requires_grad_(False)
    try:
        fisher_susceptibility(tiny_lm, QUERY, top_k=3)
        assert [p.requires_grad for p in params] == [False] + [True] * (len(params) - 1)
    finally:
        params[0].requires_grad_(True)


def test_truncation_is_a_checked_run_setting():
    from ctxleak.errors import ConfigError
    from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions

    assert SusceptibilityOptions().fisher_truncation == "renormalised"
    assert SusceptibilityOptions().to_dict()["fisher_truncation"] == "renormalised"
    with pytest.raises(ConfigError, match="^fisher_truncation must") as err:
        SusceptibilityOptions(fisher_truncation="clipped").validate()
    assert err.value.param == "fisher_truncation"
