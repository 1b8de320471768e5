"""ICLInf maths (paper 001 Eq. 4, App. B): losses, calibration, summaries and exemplar draws."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ctxleak.errors import ConfigError
from ctxleak.methods.icl import (
    calibrate_sets,
    content_free_logp,
    contextual_calibrate,
    draw_exemplars,
    position_losses,
    query_iclinf,
    renormalise,
    select_queries,
    summarize_iclinf,
)

logits = st.integers(2, 8).flatmap(
    lambda k: arrays(np.float64, (k,), elements=st.floats(-30, 30, allow_nan=False)))


def dist(values) -> np.ndarray:
    return renormalise(np.asarray(values, dtype=np.float64))


@settings(deadline=None)
@given(logits)
def test_unchanged_distribution_gives_zero_loss(z):
    p = dist(z)
    loo = np.stack([p, p, p])
    assert position_losses(p, loo).tolist() == [0.0, 0.0, 0.0]
    assert query_iclinf(position_losses(p, loo)) == 0.0


@settings(deadline=None)
@given(logits, st.data())
def test_loss_is_symmetric_and_nonnegative(z, data):
    k = len(z)
    w = data.draw(arrays(np.float64, (k,), elements=st.floats(-30, 30, allow_nan=False)))
    p, q = dist(z), dist(w)
    a, b = position_losses(p, q[None]), position_losses(q, p[None])
    assert a[0] == b[0] >= 0.0
    assert a[0] == pytest.approx(np.max(np.abs(p - q)))


def test_loss_is_max_over_labels_then_positions():
    full = np.log([0.5, 0.3, 0.2])
    loo = np.log([[0.5, 0.3, 0.2], [0.25, 0.5, 0.25], [0.6, 0.3, 0.1]])
    losses = position_losses(full, loo)
    assert losses == pytest.approx([0.0, np.log(2), np.log(2)])
    assert query_iclinf(losses) == pytest.approx(np.log(2))


def test_labels_impossible_in_both_distributions_cost_nothing():
    full = np.array([0.0, -np.inf])
    assert position_losses(full, full[None]).tolist() == [0.0]


def test_renormalise_restricts_and_sums_to_one():
    logp = np.log([0.1, 0.2, 0.05])
    out = renormalise(logp)
    assert np.exp(out).sum() == pytest.approx(1.0)
    assert np.exp(out) == pytest.approx(np.array([0.1, 0.2, 0.05]) / 0.35)


@settings(max_examples=examples(60), deadline=None)
@given(logits, st.sampled_from([0.0, 1e-6, 1e-2]))
def test_uniform_content_free_calibration_is_identity(z, eps):
    p = dist(z)
    k = len(z)
    uniform = np.full(k, -np.log(k))
    np.testing.assert_allclose(contextual_calibrate(p, uniform, eps), p, atol=1e-12)
    # three uniform content-free inputs, calibrated set by set
    cf = np.broadcast_to(uniform, (2, 3, k))
    np.testing.assert_allclose(calibrate_sets(np.stack([p, p]), cf, eps), np.stack([p, p]),
                               atol=1e-12)


def test_calibration_divides_by_content_free_and_renormalises():
    p = np.log([0.6, 0.3, 0.1])
    p_cf = np.log([0.5, 0.25, 0.25])
    expected = np.array([0.6 / 0.5, 0.3 / 0.25, 0.1 / 0.25])
    expected /= expected.sum()
    np.testing.assert_allclose(np.exp(contextual_calibrate(p, p_cf, eps=0.0)), expected, rtol=1e-12)
    eps = 0.1
    w = 1 / (np.exp(p_cf) + eps)
    q = w * np.exp(p)
    np.testing.assert_allclose(np.exp(contextual_calibrate(p, p_cf, eps)), q / q.sum(), rtol=1e-12)


def test_content_free_is_the_mean_of_distributions():
    rows = np.log([[0.5, 0.5], [0.9, 0.1], [0.1, 0.9]])
    assert np.exp(content_free_logp(rows)) == pytest.approx([0.5, 0.5])
    per_set = np.log([[[0.2, 0.8], [0.4, 0.6]], [[1.0, 1e-300], [0.5, 0.5]]])
    np.testing.assert_allclose(np.exp(content_free_logp(per_set)), [[0.3, 0.7], [0.75, 0.25]])


def test_each_set_uses_its_own_content_free_distribution():
    p = np.log([[0.5, 0.5], [0.5, 0.5]])
    cf = np.log([[[0.8, 0.2]] * 3, [[0.2, 0.8]] * 3])
    out = np.exp(calibrate_sets(p, cf, eps=0.0))
    assert out[0] == pytest.approx([0.2, 0.8])
    assert out[1] == pytest.approx([0.8, 0.2])


def test_summary_mean_std_accuracy_and_positions():
    s = summarize_iclinf([1.0, 2.0, 3.0], [[1, 0, 1], [2, 0, 2], [3, 0, 0]], [True, False, True])
    assert s.n == 3 and s.mean == pytest.approx(2.0) and s.std == pytest.approx(1.0)
    assert s.accuracy == pytest.approx(2 / 3)
    assert s.loss_by_position == pytest.approx([2.0, 0.0, 1.0])
    assert summarize_iclinf([0.5], [[0.5]]).std == 0.0


@settings(deadline=None)
@given(st.integers(1, 300), st.data())
def test_draws_are_distinct_seeded_and_nested(pool, data):
    n = data.draw(st.integers(1, min(pool, 12)))
    seed, j = data.draw(st.integers(0, 2**31)), data.draw(st.integers(0, 10**6))
    draw = draw_exemplars(pool, n, seed, j)
    assert len(set(draw)) == n and all(0 <= i < pool for i in draw)
    assert draw == draw_exemplars(pool, n, seed, j)
    assert draw_exemplars(pool, min(pool, n + 3), seed, j)[:n] == draw


def test_draws_differ_between_queries_and_cover_the_pool():
    draws = [tuple(draw_exemplars(120, 4, 0, j)) for j in range(200)]
    assert len(set(draws)) > 190
    counts = np.bincount([i for d in draws for i in d], minlength=120)
    assert counts.min() > 0  # every exemplar gets drawn: uniform-ish, no fixed subset
    with pytest.raises(ConfigError):
        draw_exemplars(3, 4, 0, 0)


def test_query_selection():
    assert select_queries(5, 100, 0) == [0, 1, 2, 3, 4]
    picked = select_queries(1000, 10, 3)
    assert picked == sorted(picked) and len(set(picked)) == 10
    assert picked == select_queries(1000, 10, 3) != select_queries(1000, 10, 4)
