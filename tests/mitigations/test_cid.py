"""CID, token influence and bounded CID on tiny models (paper 000)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import examples
from helpers.cid_ledgers import cid_ledger
from helpers.hand_influence import hand_bounded_window_logp, hand_unigram_influence
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxleak.engine.batching import BatchPolicy, using
from ctxleak.engine.generation import generate_streams
from ctxleak.engine.streams import single_stream
from ctxleak.errors import ConfigError
from ctxleak.methods.influence import (
    CIDConfig,
    PromptParts,
    bounded_lambda,
    cid_logprobs,
    next_token_unigram_influence,
    window_influence,
    windows,
)


def parts_for(lm, context="the capital of france is paris . the capital of italy is rome ."):
    before = tuple(lm.bos_ids + lm.encode("document :"))
    return PromptParts(before, tuple(lm.encode(context)),
                       tuple(lm.encode(". question : the capital of france is")))


def test_lambda_zero_is_no_context_decoding(tiny_lm):
    parts = parts_for(tiny_lm)
    cfg = CIDConfig(lam=0.0, temperature=0.8, max_new_tokens=12, min_new_tokens=0)
    res = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=11)
    assert np.all(np.asarray(res.token_influence) == 0.0)
    plain = generate_streams(tiny_lm, [parts.empty], single_stream(0.8), max_new_tokens=12,
                             seed=11)
    assert res.response_ids == plain.token_ids


def test_lambda_one_is_plain_decoding_with_context(tiny_lm):
    parts = parts_for(tiny_lm)
    cfg = CIDConfig(lam=1.0, temperature=0.7, max_new_tokens=10, min_new_tokens=0)
    res = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=3)
    plain = generate_streams(tiny_lm, [parts.full], single_stream(0.7), max_new_tokens=10,
                             seed=3)
    assert res.response_ids == plain.token_ids


def test_cid_cached_equals_uncached(tiny_lm):
    parts = parts_for(tiny_lm)
    cfg = CIDConfig(lam=1.5, temperature=0.9, max_new_tokens=10, min_new_tokens=4)
    a = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=5)
    b = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=5, use_cache=False)
    assert a.response_ids == b.response_ids
    np.testing.assert_allclose(a.logp_context, b.logp_context, atol=1e-6)


def test_full_window_equals_whole_context_influence(tiny_lm):
    parts = parts_for(tiny_lm)
    cfg = CIDConfig(lam=1.3, temperature=0.8, max_new_tokens=10, min_new_tokens=3)
    res = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=2)
    assert res.response_ids
    spans = windows(len(parts.context), len(parts.context))
    assert spans == [(0, len(parts.context))]
    win = window_influence(tiny_lm, parts, res.response_ids, spans, lam=1.3, temperature=0.8,
                           min_new_tokens=3)
    np.testing.assert_allclose(win.tau[0], res.token_influence, atol=1e-6)
    np.testing.assert_allclose(win.logp_context, res.logp_context, atol=1e-6)


def test_window_scores_with_prefix_reuse_equal_full_recomputation(tiny_lm):
    context = " ".join(["the capital of france is paris . news report said"] * 3)
    parts = parts_for(tiny_lm, context)
    response = tiny_lm.encode("the capital of italy is rome . yes")
    spans = windows(len(parts.context), 3)
    kw = dict(lam=0.7, temperature=1.1, min_new_tokens=2)
    a = window_influence(tiny_lm, parts, response, spans, reuse_prefix=True, **kw)
    with using(tiny_lm, BatchPolicy(batch_size=1)):
        b = window_influence(tiny_lm, parts, response, spans, reuse_prefix=False, **kw)
    np.testing.assert_allclose(a.logp_ablated, b.logp_ablated, atol=1e-6)
    # and against a hand computation for one window, one sequence at a time
    i = 2
    lo, hi = spans[i]
    ablated = parts.with_context(parts.context[:lo] + parts.context[hi:])

    def logits(ids):
        with torch.no_grad():
            return tiny_lm.model(torch.tensor([ids])).logits[0].double()

    z_abl, z_empty = logits(ablated + response), logits(parts.empty + response)
    za = z_abl[len(ablated) - 1:len(ablated) - 1 + len(response)]
    ze = z_empty[len(parts.empty) - 1:len(parts.empty) - 1 + len(response)]
    for z in (za, ze):
        z[:2, tiny_lm.eos_ids] = -1e30
    lp = torch.log_softmax((0.7 * za + 0.3 * ze) / 1.1, -1)
    expected = lp[torch.arange(len(response)), torch.tensor(response)].numpy()
    np.testing.assert_allclose(a.logp_ablated[i], expected, atol=1e-5)


def test_theorem_3_1_pmi_relation(tiny_lm):
    """With T = 1: τ = |λ·(pmi_D − pmi_D') − (log Z_D − log Z_D')| where
    pmi_D(y) = log p(y|D) − log p(y|∅) and Z_D = Σ_y p(y|∅)·exp(λ·pmi_D(y)) (paper 000, Eq. 10-12,
    with the normalisers the proportionality hides)."""
    parts = parts_for(tiny_lm)
    response = tiny_lm.encode("paris . the capital")
    lam = 1.7
    spans = windows(len(parts.context), 4)
    win = window_influence(tiny_lm, parts, response, spans, lam=lam, temperature=1.0)
    i = 1
    lo, hi = spans[i]
    ablated = parts.with_context(parts.context[:lo] + parts.context[hi:])

    def logp(ids):
        with torch.no_grad():
            z = tiny_lm.model(torch.tensor([ids + response])).logits[0].double()
        rows = z[len(ids) - 1:len(ids) - 1 + len(response)]
        return torch.log_softmax(rows, -1)

    lp_d, lp_a, lp_0 = logp(parts.full), logp(ablated), logp(parts.empty)
    pmi_d, pmi_a = lp_d - lp_0, lp_a - lp_0
    log_z_d = torch.logsumexp(lp_0 + lam * pmi_d, -1)
    log_z_a = torch.logsumexp(lp_0 + lam * pmi_a, -1)
    t = torch.arange(len(response))
    y = torch.tensor(response)
    expected = (lam * (pmi_d[t, y] - pmi_a[t, y]) - (log_z_d - log_z_a)).abs().numpy()
    np.testing.assert_allclose(win.tau[i], expected, atol=1e-5)


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
def test_bounded_cid_respects_eps_at_every_step(tiny_lm, eps):
    parts = parts_for(tiny_lm)
    cfg = CIDConfig(lam=2.0, temperature=0.8, max_new_tokens=10, min_new_tokens=3,
                    bounded_eps=eps)
    res = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=1)
    assert len(res.lambdas) >= len(res.response_ids) and res.token_eps_ex_post
    assert all(0 <= lam <= 2.0 for lam in res.lambdas)
    assert all(e <= eps + 1e-9 for e in res.token_eps_ex_post)
    assert res.composed_eps_ex_post == pytest.approx(sum(res.token_eps_ex_post))
    # replay the two streams naively and check the bound over the whole vocabulary
    ctx, emp = list(parts.full), list(parts.empty)
    for t, (tok, lam) in enumerate(zip(res.response_ids, res.lambdas)):
        with torch.no_grad():
            z1 = tiny_lm.model(torch.tensor([ctx])).logits[0, -1].double()
            z0 = tiny_lm.model(torch.tensor([emp])).logits[0, -1].double()
        if t < 3:
            z1[tiny_lm.eos_ids] = -1e30
            z0[tiny_lm.eos_ids] = -1e30
        valid = torch.ones_like(z1, dtype=torch.bool)
        if t < 3:
            valid[tiny_lm.eos_ids] = False
        gap = (cid_logprobs(z1, z0, lam, 0.8) - torch.log_softmax(z0 / 0.8, -1)).abs()[valid]
        assert float(gap.max()) <= eps / 2
        ctx.append(tok)
        emp.append(tok)


def test_bounded_cid_composed_eps_is_the_guarantee(tiny_lm):
    """Paper 000, Thm B.1: Alg. 1 makes each released token ε-DP, so the response's guarantee is
    (released tokens)·ε by basic composition, also where λ reached λ_max before the bound bound.
    The per-instance 2·max_y |log p̄_λ(y|D) − log p(y|∅)| is kept apart, as the ex-post figure."""
    parts = parts_for(tiny_lm)
    eps = 8.0
    cfg = CIDConfig(lam=0.3, temperature=0.8, max_new_tokens=10, min_new_tokens=3,
                    bounded_eps=eps)
    res = cid_ledger(tiny_lm, parts.full, parts.empty, cfg, seed=1)
    released = len(res.response_ids) + int(res.stopped_on_eos)
    assert res.bounded_eps == eps and len(res.lambdas) == released
    assert all(lam == 0.3 for lam in res.lambdas)  # λ_max everywhere: the bound never bound
    assert res.composed_eps == pytest.approx(eps * released, rel=1e-12)
    assert res.composed_eps_ex_post == pytest.approx(sum(res.token_eps_ex_post), rel=1e-12)
    assert res.composed_eps_ex_post < res.composed_eps / 2  # the two differ on this case
    plain = cid_ledger(tiny_lm, parts.full, parts.empty, CIDConfig(lam=0.3), seed=1)
    assert plain.composed_eps is None and plain.composed_eps_ex_post is None


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.floats(0.01, 5.0), lam_max=st.floats(0.1, 3.0))
def test_bounded_lambda_is_largest_feasible(seed, eps, lam_max):
    g = torch.Generator().manual_seed(seed)
    z1, z0 = torch.randn(50, generator=g, dtype=torch.float64) * 3, torch.randn(
        50, generator=g, dtype=torch.float64) * 3
    lam, div = bounded_lambda(z1, z0, eps, lam_max, 0.9)
    base = torch.log_softmax(z0 / 0.9, -1)

    def gap(x):
        return float((cid_logprobs(z1, z0, x, 0.9) - base).abs().max())

    assert 0 <= lam <= lam_max and gap(lam) <= eps / 2
    assert div == pytest.approx(gap(lam), abs=1e-12)
    if lam < lam_max:  # a slightly larger λ breaks the bound (bisection found the edge)
        assert gap(min(lam_max, lam + 1e-6 * max(1.0, lam_max))) > eps / 2 - 1e-5


def test_config_validation():
    # library errors name the parameter (the CLI shows its flag instead)
    with pytest.raises(ConfigError, match="^lam must be >= 0") as info:
        CIDConfig(lam=-0.1)
    assert info.value.param == "lam"
    with pytest.raises(ConfigError, match="^temperature must be > 0"):
        CIDConfig(temperature=0)
    with pytest.raises(ConfigError, match="^min_new_tokens must be between 0 and"):
        CIDConfig(max_new_tokens=5, min_new_tokens=6)
    with pytest.raises(ConfigError, match="^bounded_eps must be >= 0"):
        CIDConfig(bounded_eps=-0.5)
    # an ε whose composition over a response overflows is refused, not blamed on the model
    with pytest.raises(ConfigError, match="^bounded_eps 1e\\+308 per token composes to more "
                                          "than the largest float over 9 tokens") as info:
        CIDConfig(bounded_eps=1e308, max_new_tokens=8, min_new_tokens=8)
    assert info.value.param == "bounded_eps"
    cid, _ = CIDConfig(bounded_eps=1e300, max_new_tokens=8, min_new_tokens=8)
    assert cid.bounded_eps == 1e300


def test_windows():
    assert windows(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert windows(5, 2, stride=1) == [(0, 2), (1, 3), (2, 4), (3, 5)]
    assert windows(3, 3) == [(0, 3)]
    with pytest.raises(ConfigError, match="larger than the context"):
        windows(3, 4)
    with pytest.raises(ConfigError):
        windows(3, 0)


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_bounded_cid_windows_use_each_steps_lambda(tiny_lm, eps):
    """Bounded CID (paper 000, App. B, Alg. 1) draws y_t at its own λ_t: the window that deletes
    the whole context (n = |D|) is then the response influence itself, and each token's τ
    against it is at most ε/2 (Alg. 1, line 2). Scoring the windows at λ_max breaks both."""
    from ctxleak.methods.influence import InfluenceOptions, Setting, measure_example
    from ctxleak.methods.influence.data import InfluenceExample

    example = InfluenceExample("x", "the capital of france is paris . the capital of italy is "
                               "rome .", "question : the capital of france is", None, "qa")
    options = InfluenceOptions(max_new_tokens=10, min_new_tokens=3, bounded_eps=eps,
                               ngram=10_000, template="document : {context} . {query}")
    with using(tiny_lm, BatchPolicy(batch_size=1)):
        rec = measure_example(tiny_lm, example, Setting.cid(lam=2.0, temperature=0.8), options,
                              seed=1)
    n = len(rec["response_ids"])
    assert n and rec["ngram"] == rec["context_tokens"] and len(rec["window_influence"]) == 1
    lambdas = np.array(rec["lambdas"][:n])
    assert lambdas.min() < 2.0  # the bound was active, so λ_t differs from λ_max
    assert rec["window_influence"][0] == pytest.approx(rec["influence"], abs=1e-5)
    tau = np.abs(np.array(rec["logp_context"]) - np.array(rec["window_logp"][0]))
    np.testing.assert_allclose(tau, rec["token_influence"], atol=1e-5)
    assert np.all(tau <= eps / 2 + 1e-9)
    np.testing.assert_allclose(rec["window_logp"][0], rec["logp_empty"], atol=1e-5)


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_bounded_cid_windows_score_each_neighbour_at_its_own_lambda(tiny_lm, batch_invariant):
    """Bounded CID's window influence is the mechanism's privacy loss (paper 000, Def. 3.1 with
    Thm B.1): p̄(y_t | D) at D's λ_t against p̄(y_t | D∖D_i) at the λ'_t that Alg. 1 picks on
    the neighbour's own logits, checked against a from-scratch recomputation of every prompt,
    step and bisection, in the batch-invariant and the shared-batch paths alike."""
    from ctxleak.methods.influence import InfluenceOptions, Setting, measure_example
    from ctxleak.methods.influence.data import InfluenceExample, prompt_parts

    eps, lam_max, temp, min_new = 0.5, 2.0, 0.8, 3
    template = "document : {context} . {query}"
    example = InfluenceExample("x", "the capital of france is paris . the capital of italy is "
                               "rome .", "question : the capital of france is", None, "qa")
    options = InfluenceOptions(max_new_tokens=8, min_new_tokens=min_new, bounded_eps=eps,
                               ngram=4, stride=3, template=template)
    with using(tiny_lm, BatchPolicy(batch_size=2, invariant=batch_invariant)):
        rec = measure_example(tiny_lm, example, Setting.cid(lam=lam_max, temperature=temp), options,
                              seed=1)
    parts = prompt_parts(tiny_lm, example, template)[0]
    response, spans = rec["response_ids"], [tuple(s) for s in rec["windows"]]
    assert len(response) >= 3 and len(spans) >= 3
    full, ablated = hand_bounded_window_logp(tiny_lm, parts, response, spans, eps, lam_max,
                                             temp, min_new)
    np.testing.assert_allclose(rec["window_logp"], ablated, atol=1e-4)
    np.testing.assert_allclose(rec["window_influence"], np.abs(full - ablated).sum(1),
                               atol=1e-3)
    # the teeth: mixing every neighbour at D's own λ_t gives other numbers on this example, by
    # ten times the tolerance of the check above at least (it would fail that check)
    lams = np.array(rec["lambdas"][:len(response)])
    assert lams.min() < lam_max
    z = [[float(x) for x in row] for row in ablated]
    at_d = _neighbours_at_lambdas(tiny_lm, parts, response, spans, lams, temp, min_new)
    assert np.abs(at_d - np.array(z)).max() > 10 * 1e-4


def _neighbours_at_lambdas(lm, parts, response, spans, lams, temp, min_new):
    """log p̄_{λ_t}(y_t | D∖D_i) with D's λ_t (what scoring did before neighbours got theirs)."""
    ctx = list(parts.context)
    out = []
    for a, b in spans:
        row = []
        for t, token in enumerate(response):
            prefix = list(parts.after) + list(response[:t])
            with torch.no_grad():
                z = tiny_lm_logits(lm, list(parts.before) + ctx[:a] + ctx[b:] + prefix)
                z0 = tiny_lm_logits(lm, list(parts.before) + prefix)
            if t < min_new:
                z[lm.eos_ids] = z0[lm.eos_ids] = -1e30
            row.append(float(cid_logprobs(z, z0, float(lams[t]), temp)[token]))
        out.append(row)
    return np.array(out)


def tiny_lm_logits(lm, ids):
    return lm.model(torch.tensor([ids])).logits[0, -1].double()


@pytest.mark.parametrize("prefix_len, min_new", [(0, 0), (0, 2), (1, 2), (2, 2)])
def test_next_token_unigram_influence_by_hand(tiny_lm, prefix_len, min_new):
    parts = parts_for(tiny_lm)
    prefix = tiny_lm.encode("paris .")[:prefix_len]
    token = tiny_lm.encode("the")[0]
    with using(tiny_lm, BatchPolicy(batch_size=2)):
        got = next_token_unigram_influence(tiny_lm, parts, prefix, token, lam=1.4,
                                           temperature=0.9, min_new_tokens=min_new)
    want = hand_unigram_influence(tiny_lm, parts, prefix, token, 1.4, 0.9,
                                  mask_eos=prefix_len < min_new)
    assert got.shape == (len(parts.context),)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert got.max() > 1e-4  # some context token matters: the comparison has teeth
