"""Tests for ctxleak.mitigations.accounting (paper 001 App. C): events, accountant, Rényi divergence,
Algorithms 2-3, and the acceptance reproduction of Tables 4-6."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_softmax

from ctxleak.mitigations.accounting import (
    DEFAULT_ORDERS,
    ComposedEvent,
    DPTokenEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    MinEvent,
    RDPAccountant,
    ZCDPEvent,
    bounded_from_unbounded,
    calibrate,
    empirical_epsilon,
    epsilon_floor,
    rdp_to_approx_dp,
    renyi_divergence,
    theoretical_epsilon,
    theoretical_rdp,
    unbounded_from_bounded,
)

ORDERS = np.asarray(DEFAULT_ORDERS, dtype=float)
PAPER = {"clip": 10.0, "subset_size": 50, "temperature": 2.0, "n_gen": 50, "max_tokens": 40}
DELTA = 1e-5


def test_module_does_not_import_torch():
    import subprocess

    code = ("import sys, ctxleak.mitigations.accounting; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- events ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rho,count", [(0.01, 1), (0.003, 2000), (0.5, 7), (2.0, 3)])
def test_zcdp_matches_dp_accounting(rho, count):
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant

    ours = RDPAccountant(ORDERS).compose(ZCDPEvent(rho), count)
    theirs = RdpAccountant(list(ORDERS)).compose(dpa.ZCDpEvent(rho), count)
    np.testing.assert_allclose(ours.get_rdp(), theirs.rdp, rtol=1e-12)
    for delta in (1e-3, 1e-5, 1e-8):
        eps, alpha = ours.get_epsilon_and_order(delta)
        eps_t, alpha_t = theirs.get_epsilon_and_optimal_order(delta)
        assert eps == pytest.approx(eps_t, rel=1e-12)
        assert alpha == alpha_t


@pytest.mark.parametrize("sigma,count", [(0.8, 10), (2.0, 1000), (5.0, 1)])
def test_gaussian_matches_dp_accounting(sigma, count):
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant

    ours = RDPAccountant(ORDERS).compose(GaussianEvent(sigma), count)
    theirs = RdpAccountant(list(ORDERS)).compose(dpa.GaussianDpEvent(sigma), count)
    np.testing.assert_allclose(ours.get_rdp(), theirs.rdp, rtol=1e-10)
    assert ours.get_epsilon(1e-6) == pytest.approx(theirs.get_epsilon(1e-6), rel=1e-10)


@given(eps=st.floats(1e-4, 50), count=st.integers(0, 5000))
def test_composition_is_linear_in_count(eps, count):
    event = ExponentialMechanismEvent(eps)
    np.testing.assert_allclose(ComposedEvent(event, count).rdp(ORDERS), count * event.rdp(ORDERS))
    once = RDPAccountant(ORDERS)
    for _ in range(3):
        once.compose(event)
    np.testing.assert_allclose(once.get_rdp(), RDPAccountant(ORDERS).compose(event, 3).get_rdp())


@given(eps=st.floats(0, 100), alpha=st.floats(1.0001, 1e4))
def test_em_bound_never_above_pure_dp(eps, alpha):
    r = float(ExponentialMechanismEvent(eps).rdp(np.array([alpha]))[0])
    assert 0 <= r <= eps * (1 + 1e-12) + 1e-15
    assert r <= alpha * eps**2 / 2 * (1 + 1e-12) + 1e-300


@pytest.mark.parametrize("eps", [1e-3, 0.1, 1.0, 3.0])
def test_em_bound_matches_sinh_formula_and_tends_to_eps(eps):
    a = np.array([1.5, 2.0, 5.0, 20.0])
    sinh = np.log((np.sinh(a * eps) - np.sinh((a - 1) * eps)) / np.sinh(eps)) / (a - 1)
    expected = np.minimum(a * eps**2 / 2, sinh)
    np.testing.assert_allclose(ExponentialMechanismEvent(eps).rdp(a), expected, rtol=1e-9)
    assert float(ExponentialMechanismEvent(eps).rdp(np.array([1e9]))[0]) == pytest.approx(eps,
                                                                                         rel=1e-6)


def test_em_bound_no_overflow():
    r = ExponentialMechanismEvent(500.0).rdp(ORDERS)
    assert np.all(np.isfinite(r)) and np.all(r <= 500.0)


@given(clip=st.floats(0.01, 100), s=st.integers(1, 500), tau=st.floats(0.01, 100))
def test_token_event_is_min_of_zcdp_and_em(clip, s, tau):
    event = DPTokenEvent(clip, s, tau)
    d = clip / (s * tau)
    assert event.sensitivity == pytest.approx(d)
    expected = np.minimum(ORDERS * d**2 / 2, ExponentialMechanismEvent(2 * d).rdp(ORDERS))
    np.testing.assert_allclose(event.rdp(ORDERS), expected, rtol=1e-12)
    np.testing.assert_allclose(
        MinEvent((ZCDPEvent(d**2 / 2), ExponentialMechanismEvent(2 * d))).rdp(ORDERS), expected)


def test_token_event_large_sensitivity_uses_em_bound():
    # zCDP grows without bound in α; the EM term caps each token at ε_EM = 2Δ
    r = DPTokenEvent(10, 1, 0.5).rdp(ORDERS)
    assert np.all(r <= 2 * 20.0)
    assert r[-1] < ORDERS[-1] * 20.0**2 / 2


@pytest.mark.parametrize("bad", [{"clip": 0}, {"subset_size": -1}, {"temperature": 0},
                                 {"temperature": float("nan")}])
def test_token_event_rejects_bad_params(bad):
    params = {"clip": 1.0, "subset_size": 2, "temperature": 1.0} | bad
    with pytest.raises(ValueError):
        DPTokenEvent(**params)


def test_accountant_rejects_bad_orders_and_delta():
    with pytest.raises(ValueError):
        RDPAccountant([1.0, 2.0])
    with pytest.raises(ValueError):
        RDPAccountant([])
    with pytest.raises(ValueError):
        RDPAccountant().get_epsilon(0.0)
    with pytest.raises(ValueError):
        RDPAccountant().get_epsilon(1.0)


# --- conversions ------------------------------------------------------------------------------


def test_theorem_c8_formula():
    orders, rdp = [2.0, 3.0, 10.0], [5.0, 4.0, 4.0]
    manual = [r + math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1)
              for a, r in zip(orders, rdp, strict=True)]
    eps, alpha = rdp_to_approx_dp(orders, rdp, 1e-5)
    assert eps == pytest.approx(min(manual))
    assert alpha == orders[int(np.argmin(manual))]


def test_bounded_unbounded_translation():
    assert bounded_from_unbounded(1.5) == 3.0
    assert unbounded_from_bounded(3.0) == 1.5
    assert empirical_epsilon(4.0, 5.0, 1e-5) == pytest.approx(
        2 * (4.0 + math.log(4 / 5) - (math.log(1e-5) + math.log(5)) / 4))


# --- Rényi divergence ---------------------------------------------------------------------------

_logits = st.lists(st.floats(-20, 20), min_size=2, max_size=12)


def _pair(draw_a, draw_b):
    n = min(len(draw_a), len(draw_b))
    return log_softmax(np.array(draw_a[:n])), log_softmax(np.array(draw_b[:n]))


@given(a=_logits, alpha=st.floats(1.01, 200))
def test_renyi_of_identical_is_zero(a, alpha):
    lp = log_softmax(np.array(a))
    assert renyi_divergence(lp, lp, alpha) == pytest.approx(0.0, abs=1e-9)


@given(a=_logits, b=_logits)
def test_renyi_alpha_to_one_is_kl(a, b):
    lp, lq = _pair(a, b)
    kl = float(np.sum(np.exp(lp) * (lp - lq)))
    assert renyi_divergence(lp, lq, 1.0) == pytest.approx(kl, rel=1e-9, abs=1e-12)
    assert renyi_divergence(lp, lq, 1 + 1e-7) == pytest.approx(kl, rel=1e-3, abs=1e-5)


@settings(max_examples=examples(200))
@given(a=_logits, b=_logits, a1=st.floats(1.0, 100), a2=st.floats(1.0, 100))
def test_renyi_non_decreasing_in_alpha(a, b, a1, a2):
    lp, lq = _pair(a, b)
    lo, hi = sorted((a1, a2))
    d_lo, d_hi = renyi_divergence(lp, lq, lo), renyi_divergence(lp, lq, hi)
    assert d_lo <= d_hi + 1e-9 * max(1.0, d_hi)
    assert d_hi <= renyi_divergence(lp, lq, math.inf) + 1e-9


def test_renyi_infinite_order_support_and_symmetric():
    with np.errstate(divide="ignore"):
        lp = np.log([0.5, 0.5, 0.0])
    lq = np.log([0.25, 0.25, 0.5])
    assert renyi_divergence(lp, lq, math.inf) == pytest.approx(math.log(2))
    assert renyi_divergence(lp, lq, 2.0) == pytest.approx(math.log(2 * 0.25 / 0.25))
    assert renyi_divergence(lq, lp, 2.0) == math.inf  # Q has mass where P has none
    assert renyi_divergence(lp, lq, 2.0, symmetric=True) == math.inf
    batch = renyi_divergence(np.stack([lp, lq]), lq, 2.0)
    assert batch.shape == (2,) and batch[1] == 0.0


# --- Algorithms 2 and 3 -------------------------------------------------------------------------


def test_theoretical_epsilon_is_algorithm_2_on_composed_rdp():
    rdp = theoretical_rdp(**PAPER)
    np.testing.assert_allclose(rdp, 2000 * DPTokenEvent(10.0, 50, 2.0).rdp(ORDERS))
    assert theoretical_epsilon(**PAPER, delta=DELTA) == rdp_to_approx_dp(ORDERS, rdp, DELTA)


@given(target=st.floats(0.1, 200), search=st.sampled_from(["temperature", "clip", "subset_size"]))
@settings(max_examples=examples(40), deadline=None)
def test_calibrate_meets_target(target, search):
    r = calibrate(target, DELTA, **PAPER, search=search)
    assert r.eps <= target
    params = {"clip": r.clip, "subset_size": r.subset_size, "temperature": r.temperature}
    assert theoretical_epsilon(**params, n_gen=50, max_tokens=40, delta=DELTA) == (r.eps, r.alpha)
    if search == "subset_size":
        assert float(r.subset_size).is_integer()
        if r.subset_size > 1:  # one fewer prompt misses the target
            assert theoretical_epsilon(r.clip, r.subset_size - 1, r.temperature, 50, 40,
                                       DELTA)[0] > target
    else:
        assert r.eps == pytest.approx(target, rel=1e-9)


def test_calibrate_unreachable_target_and_bad_search():
    assert epsilon_floor(DELTA) == pytest.approx(0.0604, abs=1e-4)
    with pytest.raises(ValueError, match="cannot be reached"):
        calibrate(0.05, DELTA, **PAPER)
    with pytest.raises(ValueError, match="search"):
        calibrate(1.0, DELTA, **PAPER, search="delta")


def test_calibrate_custom_orders():
    r = calibrate(10.0, DELTA, **PAPER, orders=[2, 4, 8])
    assert r.alpha in (2, 4, 8) and r.eps == pytest.approx(10.0)


# --- acceptance: paper 001, Tables 4-6 (s=50, c=10, N_gen=50, T_max=40, δ=1e-5) ---------------

TABLE_4 = [  # ε_target, temperature, α   (s = 50, c = 10)
    (0.5, 68.58, 32), (1, 36.18, 18), (5, 8.53, 5), (10, 4.80, 3),
    (20, 2.81, 3), (50, 1.42, 2), (100, 0.94, 2)]
TABLE_5 = [  # ε_target, clip, α   (s = 50, τ = 2)
    (1, 0.55, 18), (5, 2.34, 5), (10, 4.16, 3), (50, 14.12, 2), (100, 21.20, 2)]
TABLE_6 = [  # ε_target, subset size, α (the table's column headed "ε_data-dep.")   (c = 10, τ = 2)
    (5, 214, 5), (10, 121, 4), (50, 36, 2)]


@pytest.mark.parametrize("target,temperature,alpha", TABLE_4)
def test_table_4_temperature(target, temperature, alpha):
    r = calibrate(target, DELTA, **PAPER, search="temperature")
    assert round(r.temperature, 2) == temperature
    assert r.alpha == alpha


@pytest.mark.parametrize("target,clip,alpha", TABLE_5)
def test_table_5_clip(target, clip, alpha):
    r = calibrate(target, DELTA, **PAPER, search="clip")
    assert round(r.clip, 2) == clip
    assert r.alpha == alpha


@pytest.mark.parametrize("target,subset_size,alpha", TABLE_6)
def test_table_6_subset_size(target, subset_size, alpha):
    r = calibrate(target, DELTA, **PAPER, search="subset_size")
    assert r.subset_size == subset_size
    assert r.alpha == alpha
