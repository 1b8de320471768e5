"""CID's kernel (:mod:`ctxleak.kernels`) on tiny cases computed by hand, and its one vectorised
λ_t search against the scalar bisection that ran before it (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4 and App. B, Alg. 1). The search
against an exact edge, and its passes: test_cid_edge_search.py."""

from __future__ import annotations

import math

import pytest
import torch

from ctxleak.kernels.cid import (
    BOUND_MARGIN,
    MASKED_LOGIT,
    CIDSettingError,
    bounded_lambda,
    bounded_lambdas,
    check_cid_settings,
    cid_logprobs,
    divergence_at,
)
from ctxleak.kernels.draw import draw, seeded_generator


def _scalar_bounded_lambda(z_context, z_empty, eps, lam_max, temperature, steps=40):
    """The scalar 40-step bisection ctxleak ran per decoding step before the kernel, line for
    line (see :func:`_lands_on_the_bisection`); with ``steps=60``, the edge itself to float
    precision."""
    def divergence(lam, base, valid):
        diff = (cid_logprobs(z_context, z_empty, lam, temperature) - base).abs()
        return float(diff[valid].max())

    base = torch.log_softmax(z_empty.double() / temperature, dim=-1)
    valid = (z_empty > MASKED_LOGIT / 2) & (z_context > MASKED_LOGIT / 2)
    half = eps / 2.0 - BOUND_MARGIN
    top = divergence(lam_max, base, valid)
    if top <= half:
        return lam_max, top
    lo, hi, lo_div = 0.0, lam_max, 0.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        d = divergence(mid, base, valid)
        if d <= half:
            lo, lo_div = mid, d
        else:
            hi = mid
    return lo, lo_div


def _lands_on_the_bisection(z_context, z_empty, eps, lam_max, temperature):
    """The kernel's one-row search against the scalar bisection: λ_t within 1e-12 of the edge
    (a 60-step bisection) and of the old 40-step λ_t, or within the old one's resolution
    λ_max · 2⁻⁴⁰ where that is wider (λ_max > 1: it stopped up to that far below the edge); the
    divergence it returns is the one at its own λ_t, bit for bit, and within the bound (λ_t = 0
    where ε/2 is below the margin). Returns the search's ``(λ_t, divergence)``."""
    lam, div = bounded_lambda(z_context, z_empty, eps, lam_max, temperature)
    old, _ = _scalar_bounded_lambda(z_context, z_empty, eps, lam_max, temperature)
    edge, _ = _scalar_bounded_lambda(z_context, z_empty, eps, lam_max, temperature, steps=60)
    assert abs(lam - old) <= max(1e-12, lam_max * 2.0 ** -40) and abs(lam - edge) <= 1e-12
    base = torch.log_softmax(z_empty.double() / temperature, dim=-1)
    valid = (z_empty > MASKED_LOGIT / 2) & (z_context > MASKED_LOGIT / 2)
    gap = (cid_logprobs(z_context, z_empty, lam, temperature) - base).abs()[valid].max()
    assert div == float(gap)
    assert div <= eps / 2 - BOUND_MARGIN or (lam, div) == (0.0, 0.0)
    return lam, div


def _logits(seed: int, vocab: int = 50, masked: int = 0, scale: float = 3.0):
    g = torch.Generator().manual_seed(seed)
    zc = torch.randn(vocab, generator=g, dtype=torch.float64) * scale
    ze = torch.randn(vocab, generator=g, dtype=torch.float64) * scale
    if masked:
        zc[:masked] = MASKED_LOGIT
        ze[:masked] = MASKED_LOGIT
    return zc, ze


def test_three_tokens_by_hand():
    """z_D = (2, 0, 0), z_∅ = (0, 1, 0), λ = 0.5, T = 0.5: the mixture is (2, 1, 0), so
    log p̄ = (2, 1, 0) − log(e² + e + 1)."""
    zc = torch.tensor([1.0, 0.0, 0.0])
    ze = torch.tensor([0.0, 0.5, 0.0])
    got = cid_logprobs(zc * 2, ze * 2, 0.5, 0.5)
    norm = math.log(math.exp(2) + math.exp(1) + 1)
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx([2 - norm, 1 - norm, -norm], abs=1e-15)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_lambda_zero_and_one_are_the_streams_bit_for_bit(temperature):
    zc, ze = _logits(1)
    assert torch.equal(cid_logprobs(zc, ze, 0.0, temperature),
                       torch.log_softmax(ze / temperature, dim=-1))
    assert torch.equal(cid_logprobs(zc, ze, 1.0, temperature),
                       torch.log_softmax(zc / temperature, dim=-1))
    rows = torch.stack([zc, zc]), torch.stack([ze, ze])
    per_row = cid_logprobs(*rows, torch.tensor([0.0, 1.0]), temperature)
    assert torch.equal(per_row[0], cid_logprobs(zc, ze, 0.0, temperature))
    assert torch.equal(per_row[1], cid_logprobs(zc, ze, 1.0, temperature))


def test_bounded_lambda_holds_the_bound_and_is_largest():
    zc, ze = _logits(2, masked=3)
    eps, temperature = 0.4, 0.8
    lam, div = bounded_lambda(zc, ze, eps, 1.0, temperature)
    base = torch.log_softmax(ze / temperature, dim=-1)
    gap = (cid_logprobs(zc, ze, lam, temperature) - base).abs()[3:].max()
    assert 0 < lam < 1 and float(gap) == div <= eps / 2
    above = (cid_logprobs(zc, ze, lam + 1e-9, temperature) - base).abs()[3:].max()
    assert float(above) > eps / 2 - BOUND_MARGIN  # a hair more λ breaks the bound
    assert bounded_lambda(zc, ze, 1e3, 0.7, temperature)[0] == 0.7  # slack: λ_max itself


CASES = [  # (seed, vocab, masked, eps, lam_max, temperature)
    *[(s, 40, 0, 0.5, 1.0, 0.8) for s in range(6)],
    *[(s, 40, 4, 0.3, 1.0, 1.0) for s in range(6, 10)],   # EOS masked in both streams
    (10, 40, 0, 100.0, 1.0, 0.8),                           # the bound never binds
    (11, 40, 0, 1e-7, 1.0, 0.8),                            # ε/2 below the margin: λ_t = 0
    (12, 40, 0, 0.5, 0.0, 0.8),                             # λ_max = 0
    (13, 40, 0, 0.5, 2.0, 0.8),                             # λ > 1: the bisection meets λ = 1
    (14, 40, 2, 0.5, 2.0, 1.2),
    (15, 8, 0, 0.2, 1.0, 0.5),
]


@pytest.mark.parametrize("seed,vocab,masked,eps,lam_max,temperature", CASES)
def test_one_row_search_lands_on_the_old_scalar_bisection(seed, vocab, masked, eps, lam_max,
                                                          temperature):
    zc, ze = _logits(seed, vocab, masked)
    _lands_on_the_bisection(zc, ze, eps, lam_max, temperature)


def test_ties_and_equal_streams():
    """Equal streams (no divergence at any λ), tied logits, and a context stream that masks a
    token the other does not: still the scalar bisection's λ_t."""
    zc, ze = _logits(20)
    for a, b in [(zc, zc.clone()), (torch.zeros(9, dtype=torch.float64),
                                   torch.zeros(9, dtype=torch.float64)),
                 (torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64),
                  torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64))]:
        _lands_on_the_bisection(a, b, 0.3, 1.0, 0.9)
    zc[5] = MASKED_LOGIT  # masked in one stream only: out of the maximum
    _lands_on_the_bisection(zc, ze, 0.3, 1.0, 0.9)


def test_float32_logits_give_the_scalar_lambda():
    zc, ze = (z.float() for z in _logits(21, masked=2))
    _lands_on_the_bisection(zc, ze, 0.5, 1.0, 0.8)


def test_rows_at_once_are_each_row_alone():
    """The [T, V] search gives every row the floats of its own one-row search (a scored
    response sees the λ_t its decoding step chose)."""
    pairs = [_logits(30 + t, masked=2 * (t % 2)) for t in range(7)]
    zc, ze = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    lams, divs = bounded_lambdas(zc, ze, 0.5, 1.0, 0.8)
    assert lams.dtype == divs.dtype == torch.float64
    for t, (a, b) in enumerate(pairs):
        assert (float(lams[t]), float(divs[t])) == bounded_lambda(a, b, 0.5, 1.0, 0.8)


def test_eps_zero_leaves_only_the_no_context_distribution():
    """ε = 0 (Alg. 1, App. B): only λ_t = 0 keeps every token within ε/2 = 0 of the
    no-context distribution, so each step is the no-context stream bit for bit, at any
    λ_max, even where the streams are equal."""
    pairs = [_logits(50 + t, masked=2 * (t % 2)) for t in range(4)]
    zc, ze = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    for lam_max in (0.0, 0.5, 1.0, 2.0):
        lams, divs = bounded_lambdas(zc, ze, 0.0, lam_max, 0.8)
        assert lams.tolist() == [0.0] * 4 and divs.tolist() == [0.0] * 4
        assert torch.equal(cid_logprobs(zc, ze, lams, 0.8), torch.log_softmax(ze / 0.8, -1))
    same = _logits(60)[0]
    assert bounded_lambda(same, same.clone(), 0.0, 1.0, 0.8) == (0.0, 0.0)


def test_the_draw_is_reproducible_from_its_seed():
    logprobs = torch.log_softmax(_logits(40)[0], dim=-1)
    first = [draw(logprobs, gen, True) for gen in [seeded_generator(7)] for _ in range(20)]
    again = [draw(logprobs, gen, True) for gen in [seeded_generator(7)] for _ in range(20)]
    other = [draw(logprobs, gen, True) for gen in [seeded_generator(8)] for _ in range(20)]
    assert first == again != other
    assert draw(logprobs, seeded_generator(7), False) == int(logprobs.argmax())
    masked = torch.log_softmax(torch.tensor([0.0, MASKED_LOGIT, 0.0], dtype=torch.float64), -1)
    gen = seeded_generator(0)
    assert 1 not in {draw(masked, gen, True) for _ in range(200)}


@pytest.mark.parametrize("settings,param,message", [
    ({"lam": float("nan")}, "lam", "lam must be a finite number, not nan"),
    ({"lam": -0.5}, "lam", "lam must be >= 0 (0 = no context, 1 = plain decoding), not -0.5"),
    ({"temperature": float("inf")}, "temperature", "temperature must be a finite number, not inf"),
    ({"temperature": 0}, "temperature", "temperature must be > 0, not 0"),
    ({"bounded_eps": float("inf")}, "bounded_eps", "bounded_eps must be a finite number, not inf"),
    ({"bounded_eps": -1.0}, "bounded_eps", "bounded_eps must be >= 0 (0: λ_t = 0, the no-context "
                                           "answer), not -1.0"),
    ({"lam": -1, "temperature": 0}, "lam", "lam must be >= 0"),  # λ is checked first
])
def test_settings_are_checked_once_naming_the_parameter(settings, param, message):
    with pytest.raises(CIDSettingError, match=message.replace("(", r"\(").replace(")", r"\)")
                       ) as info:
        check_cid_settings(**settings)
    assert info.value.param == param and isinstance(info.value, ValueError)
    check_cid_settings(lam=0.0, temperature=0.1, bounded_eps=1e-9)  # in range: no error
    check_cid_settings(lam=1.0, temperature=0.1, bounded_eps=0.0)  # ε = 0: the no-context answer


def test_lambda_max_comes_back_as_given_where_the_bound_holds():
    """The step's λ is the caller's λ_max itself (an int stays an int in the ledger) where the
    bound holds at it, as the scalar bisection returned it."""
    zc, ze = _logits(3)
    lam, div = bounded_lambda(zc, ze, 1e6, 1, 0.8)
    assert lam == 1 and type(lam) is int and div > 0
    lam, _ = bounded_lambda(zc, ze, 1e-3, 1, 0.8)
    assert type(lam) is float and 0 <= lam < 1


def test_infinite_logits_at_lambda_zero_and_one_stay_exact():
    """A -inf logit (a token a model rules out) at λ = 0 or 1 takes its stream as it is, where
    0 · -inf would give NaN: the one-row search lands on the scalar bisection there too."""
    zc, ze = _logits(4)
    zc[5], ze[7] = -math.inf, -math.inf
    w = torch.tensor([0.0, 1.0], dtype=torch.float64)
    rows = cid_logprobs(torch.stack([zc, zc]), torch.stack([ze, ze]), w, 0.8)
    assert torch.equal(rows[0], cid_logprobs(zc, ze, 0.0, 0.8))
    assert torch.equal(rows[1], cid_logprobs(zc, ze, 1.0, 0.8))
    assert bounded_lambda(zc, ze, 50.0, 1.0, 0.8) == _scalar_bounded_lambda(zc, ze, 50.0, 1.0, 0.8)


def test_a_row_whose_divergence_is_nan_is_searched_as_a_step_is():
    """A NaN divergence at λ_max does not pass the bound: the row is searched (down to λ_t = 0,
    as the bisection did), in a batch as in one decoding step (the old batched search kept
    λ_max for it)."""
    zc, ze = _logits(5)
    bad = zc.clone()
    bad[3] = math.nan
    lams, _ = bounded_lambdas(torch.stack([bad, zc]), torch.stack([ze, ze]), 1e6, 1.0, 0.8)
    assert lams[0].item() == bounded_lambda(bad, ze, 1e6, 1.0, 0.8)[0] == 0.0
    assert lams[1].item() == 1.0


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_divergence_at_lambda_is_the_maximum_by_hand_and_the_searchs_at_a_loose_bound(lam):
    """Plain CID's ex-post figure: max_y |log p̄_λ(y|D) − log p(y|∅)| at λ itself, over the
    tokens neither stream masks (by hand, in float64), 0 at λ = 0; and the floats bounded CID's
    search reports where its bound never binds (λ_t = λ)."""
    gen = torch.Generator().manual_seed(3)
    zc, ze = torch.randn(17, generator=gen) * 3, torch.randn(17, generator=gen) * 3
    zc[4] = MASKED_LOGIT  # masked in one stream: left out of the maximum
    mixed = torch.log_softmax((lam * zc.double() + (1 - lam) * ze.double()) / 0.7, dim=-1)
    base = torch.log_softmax(ze.double() / 0.7, dim=-1)
    keep = torch.arange(17) != 4
    by_hand = float((mixed - base).abs()[keep].max())
    got = divergence_at(zc, ze, lam, 0.7)
    assert got == pytest.approx(by_hand, rel=1e-12, abs=1e-15)
    assert (got == 0.0) == (lam == 0.0)
    assert bounded_lambda(zc, ze, 1e6, lam, 0.7) == (lam, got)
