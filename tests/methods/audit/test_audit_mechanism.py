"""Algorithm 1 on the engine and its data-dependent loss, against naive recomputation written
here (paper 001 App. C.1, Theorem C.6, App. C.3.3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import examples
from helpers.naive_draw import naive_draw
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.methods.audit import (
    DPAggregator,
    draw_subset,
    generate_private,
    leave_one_out_rdp,
    sequence_seeds,
)
from ctxleak.mitigations.accounting import renyi_divergence
from ctxleak.mitigations.dp_synthetic import leave_one_out_divergences

SENTENCES = ["the capital of france is paris .", "the doctor said yes to the patient",
             "rome is the capital of italy", "a report on the news in berlin",
             "one two three four"]


def make_prompts(lm, n):
    return [lm.bos_ids + lm.encode(f"document : {s} . answer :") for s in SENTENCES[:n]]


def naive_logits(lm, prompt, generated, step, min_new):
    """One prompt forwarded alone from scratch, float64, EOS masked as the engine does."""
    with torch.no_grad():
        z = lm.model(torch.tensor([list(prompt) + list(generated)])).logits[0, -1].double()
    if step < min_new:
        z[list(lm.eos_ids)] = MASKED_LOGIT
    return z


def clip_np(z, c):
    """clip_c(z)_i = max(−c, z_i − max_j z_j + c) (App. C.1), written out again. The engine's
    masked tokens stay marked as NaN (they are removed after aggregation, not clipped)."""
    z = np.asarray(z, dtype=np.float64)
    out = np.maximum(-c, z - z.max() + c)
    out[z <= MASKED_LOGIT / 2] = np.nan
    return out


def mechanism_logprobs(rows, temperature):
    """log softmax(mean of clipped rows / τ) in numpy, over the tokens not masked (EOS before
    the minimum length gets probability 0, the others renormalise)."""
    zbar = np.mean(rows, axis=0) / temperature
    keep = ~np.isnan(zbar)
    m = zbar[keep].max()
    out = np.full_like(zbar, -np.inf)
    out[keep] = zbar[keep] - (m + np.log(np.sum(np.exp(zbar[keep] - m))))
    return out


@pytest.mark.parametrize("alpha", [2.0, 7.5])
def test_recorded_loss_equals_recomputation_from_scratch(tiny_lm, alpha):
    clip, tau, min_new = 3.0, 0.7, 2
    prompts = make_prompts(tiny_lm, 4)
    gen = generate_private(tiny_lm, prompts, clip=clip, temperature=tau, alpha=alpha,
                           max_new_tokens=10, min_new_tokens=min_new, seed=11)
    assert len(gen.token_rdp) == gen.n_released == len(gen.token_ids) + gen.stopped_on_eos
    released = gen.token_ids + ([] if not gen.stopped_on_eos else [tiny_lm.eos_ids[0]])
    totals = np.zeros(len(prompts))
    for t in range(len(gen.token_rdp)):
        done = released[:t]
        rows = [clip_np(naive_logits(tiny_lm, p, done, t, min_new).numpy(), clip)
                for p in prompts]
        logp = mechanism_logprobs(rows, tau)
        per_prompt = []
        for p in range(len(prompts)):
            # the mechanism run again on D \ {p}: forward the remaining prompts from scratch
            others = [clip_np(naive_logits(tiny_lm, q, done, t, min_new).numpy(), clip)
                      for i, q in enumerate(prompts) if i != p]
            logq = mechanism_logprobs(others, tau)
            per_prompt.append(renyi_divergence(logp, logq, alpha, symmetric=True))
        totals += per_prompt
        assert gen.token_rdp[t] == pytest.approx(max(per_prompt), rel=1e-4, abs=1e-9)
        assert gen.token_argmax[t] == int(np.argmax(per_prompt)) or \
            per_prompt[gen.token_argmax[t]] == pytest.approx(max(per_prompt), rel=1e-4)
    assert gen.prompt_rdp == pytest.approx(totals.tolist(), rel=1e-4, abs=1e-9)
    assert gen.rdp_sum == pytest.approx(sum(gen.token_rdp))
    assert max(gen.token_rdp) > 1e-6  # the prompts differ: the test has something to compare


@settings(max_examples=examples(60), deadline=None)
@given(s=st.integers(2, 6), v=st.integers(2, 12), clip=st.floats(0.1, 20),
       tau=st.floats(0.2, 50), alpha=st.sampled_from([1.5, 2.0, 3.0, 18.0, 99.0]),
       seed=st.integers(0, 2**31 - 1))
def test_leave_one_out_reaverage_equals_prompt_removed(s, v, clip, tau, alpha, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(s, v, generator=gen, dtype=torch.float64) * 6
    agg = DPAggregator(clip, tau, alpha)
    logprobs = agg.combine(logits, 0)
    rows = [clip_np(z, clip) for z in logits.numpy()]
    np.testing.assert_allclose(logprobs.numpy(), mechanism_logprobs(rows, tau), atol=1e-12)
    got = leave_one_out_rdp(agg._clipped, logprobs, tau, alpha).numpy()
    want = [renyi_divergence(mechanism_logprobs(rows, tau),
                             mechanism_logprobs(rows[:p] + rows[p + 1:], tau), alpha,
                             symmetric=True) for p in range(s)]
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(got, leave_one_out_divergences(agg._clipped, tau, alpha).numpy(),
                               rtol=1e-9, atol=1e-14)
    rdp, p = agg.observe(logits, logprobs, 0, 0)
    assert rdp == pytest.approx(max(want), rel=1e-7, abs=1e-12) and got[p] == rdp


def naive_mechanism_generation(lm, prompts, clip, tau, n, seed, min_new):
    """Algorithm 1 as a plain loop: every prompt forwarded alone from scratch at every step,
    clipped, averaged, sampled with the engine's seeded draw (written again in numpy)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(n):
        rows = [clip_np(naive_logits(lm, p, out, step, min_new).numpy(), clip) for p in prompts]
        logp = torch.from_numpy(mechanism_logprobs(rows, tau))
        tok = naive_draw(logp, g)
        if tok in lm.eos_ids:
            return out, True
        out.append(tok)
    return out, False


@pytest.mark.parametrize("seed", [0, 5])
def test_engine_streams_equal_naive_loop(tiny_lm, seed):
    prompts = make_prompts(tiny_lm, 5)  # different lengths: left padding in the engine
    assert len({len(p) for p in prompts}) > 1
    got = generate_private(tiny_lm, prompts, clip=4.0, temperature=0.8, alpha=None,
                           max_new_tokens=12, min_new_tokens=3, seed=seed)
    want, stopped = naive_mechanism_generation(tiny_lm, prompts, 4.0, 0.8, 12, seed, 3)
    assert got.token_ids == want and got.stopped_on_eos == stopped
    assert got.token_rdp == [] and got.prompt_rdp == []
    tracked = generate_private(tiny_lm, prompts, clip=4.0, temperature=0.8, alpha=3.0,
                               max_new_tokens=12, min_new_tokens=3, seed=seed)
    assert tracked.token_ids == want  # observing does not change the draws


def test_identical_prompts_cost_nothing(tiny_lm):
    prompt = make_prompts(tiny_lm, 1)[0]
    gen = generate_private(tiny_lm, [prompt] * 3, clip=2.0, temperature=1.0, alpha=4.0,
                           max_new_tokens=6, seed=1)
    assert gen.token_rdp and max(gen.token_rdp) < 1e-12


def test_observe_needs_combine_and_alpha():
    agg = DPAggregator(1.0, 1.0, None)
    with pytest.raises(RuntimeError):
        agg.observe(torch.zeros(2, 3), torch.zeros(3), 0, 0)
    agg = DPAggregator(1.0, 1.0, 2.0)
    with pytest.raises(RuntimeError):
        agg.observe(torch.zeros(2, 3), torch.zeros(3), 0, 0)
    for bad in [dict(clip=0, temperature=1), dict(clip=1, temperature=0),
                dict(clip=1, temperature=1, alpha=1.0)]:
        with pytest.raises(ValueError):
            DPAggregator(**bad)


def test_accounting_needs_two_prompts(tiny_lm):
    with pytest.raises(ValueError, match="at least 2"):
        generate_private(tiny_lm, make_prompts(tiny_lm, 1), clip=1, temperature=1, alpha=2.0)


def test_subsets_and_seeds():
    a = draw_subset(30, 8, 123)
    assert len(set(a)) == 8 and all(0 <= i < 30 for i in a)
    assert a == draw_subset(30, 8, 123) != draw_subset(30, 8, 124)
    assert sorted(draw_subset(5, 5, 0)) == list(range(5))
    with pytest.raises(ValueError):
        draw_subset(5, 6, 0)
    s0, g0 = sequence_seeds(0, 0)
    assert len({s0, g0, *sequence_seeds(0, 1), *sequence_seeds(1, 0)}) == 6
    assert sequence_seeds(0, 3) == sequence_seeds(0, 3)


def test_masked_eos_is_removed_after_aggregation():
    """EOS masked by the engine (before ``min_new_tokens``) gets probability exactly 0 in the
    released distribution and in every remove-one neighbour; the other tokens keep
    softmax(mean clipped / τ) renormalised over them. Clipping the mask alone maps it to −c."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 9, generator=g, dtype=torch.float64) * 3
    logits[:, 2] = MASKED_LOGIT
    agg = DPAggregator(clip=1.0, temperature=5.0, alpha=3.0)
    logp = agg.combine(logits, 0, (2,))
    assert logp[2] == -np.inf
    rows = [clip_np(z, 1.0) for z in logits.numpy()]
    np.testing.assert_allclose(logp.numpy(), mechanism_logprobs(rows, 5.0), atol=1e-12)
    assert float(logp.exp().sum()) == pytest.approx(1.0)
    rdp, _ = agg.observe(logits, logp, 0, 0)
    want = max(renyi_divergence(mechanism_logprobs(rows, 5.0),
                                mechanism_logprobs(rows[:p] + rows[p + 1:], 5.0), 3.0,
                                symmetric=True) for p in range(4))
    assert rdp == pytest.approx(want, rel=1e-9)
    both = leave_one_out_divergences(agg._clipped, 5.0, 3.0, agg._excluded)
    assert float(both.max()) == pytest.approx(want, rel=1e-9)
    # a token at MASKED_LOGIT in only some rows is a real output (clipped to −c there)
    logits[0, 5] = MASKED_LOGIT
    assert agg.combine(logits, 1, (2,))[5] > -np.inf


def test_excluded_set_comes_from_the_engine_not_from_logit_values():
    """Which tokens leave the output set is what the engine says (``combine``'s ``excluded``),
    never inferred from a logit's value: a genuine logit as low as MASKED_LOGIT in every row
    is clipped to −c and stays sampleable (App. C.1); an excluded token whose logits are
    ordinary gets probability 0, the rest softmax(mean clipped / τ) renormalised."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 7, generator=g, dtype=torch.float64) * 2
    logits[:, 4] = MASKED_LOGIT  # a genuine, very low logit in every prompt: not excluded
    agg = DPAggregator(clip=2.0, temperature=3.0, alpha=2.0)
    rows = [np.maximum(-2.0, z - z.max() + 2.0) for z in logits.numpy()]  # App. C.1, no marks
    logp = agg.combine(logits, 0)
    np.testing.assert_allclose(logp.numpy(), mechanism_logprobs(rows, 3.0), atol=1e-12)
    assert logp[4] > -np.inf and agg._excluded is None
    # token 1 excluded by the engine although its logits are ordinary values
    logp = agg.combine(logits, 1, (1,))
    assert logp[1] == -np.inf and float(logp.exp().sum()) == pytest.approx(1.0)
    want = mechanism_logprobs(rows, 3.0)
    want = np.delete(want, 1) - np.logaddexp.reduce(np.delete(want, 1))
    np.testing.assert_allclose(np.delete(logp.numpy(), 1), want, atol=1e-12)
    with pytest.raises(ValueError, match="excluded"):
        agg.combine(logits, 2, (7,))


def test_min_new_tokens_never_ends_early(tiny_lm):
    """Small clip and high temperature flatten the mechanism's distribution: a masked EOS left
    at −c by clipping would be drawn often (the audit's --min-tokens bug)."""
    prompts = make_prompts(tiny_lm, 3)
    for seed in range(30):
        gen = generate_private(tiny_lm, prompts, clip=0.5, temperature=20.0, alpha=2.0,
                               max_new_tokens=8, min_new_tokens=8, seed=seed)
        assert not gen.stopped_on_eos and len(gen.token_ids) == 8
