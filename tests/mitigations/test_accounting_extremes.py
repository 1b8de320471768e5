"""The DP accounting's float inputs at their extremes (inf, nan, huge, tiny, negative): a result
computed without overflow where the maths has one, otherwise an error that names the parameter
(and, at the ``ctxleak.dp`` entry points, its meaningful range); never an OverflowError, a
ZeroDivisionError or a NaN turned into a number."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ctxleak import dp
from ctxleak.errors import ConfigError
from ctxleak.mitigations import accounting as acc
from ctxleak.mitigations import dp_synthetic as mech


@pytest.mark.parametrize("call,param", [
    (lambda: dp.calibrate(1e300), "target_eps"),
    (lambda: dp.calibrate(1, temperature=1e-300), "temperature"),
    (lambda: dp.epsilon(temperature=1e-300), "temperature"),
    (lambda: dp.epsilon(clip=1e300), "clip"),
    (lambda: dp.epsilon(subset_size=0.5), "subset_size"),
    (lambda: dp.epsilon(sequences=10**30), "sequences"),
    (lambda: dp.epsilon(max_new_tokens=2.5), "max_new_tokens"),
])
def test_dp_entry_points_name_the_parameter_and_its_range(call, param):
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.param == param and str(info.value).startswith(param)
    assert " to " in str(info.value) or "at most" in str(info.value)


def test_huge_sensitivity_is_the_pure_dp_bound_not_an_overflow():
    # Δ = c/(sτ) = 10/(50·1e-300) = 2e299: αΔ²/2 overflows, and Theorem C.5's bound at
    # ε_EM = 2Δ is ε_EM itself once αε_EM is large, so 50 × 40 tokens cost 2000 · 4e299
    eps, alpha = acc.theoretical_epsilon(10, 50, 1e-300, 50, 40, 1e-5)
    assert eps == pytest.approx(8e302, rel=1e-12) and alpha == 2
    curve = acc.ExponentialMechanismEvent(1e300).rdp(np.array([2.0, 99.0]))
    assert curve == pytest.approx([1e300, 1e300], rel=1e-12)


def test_calibrate_reaches_a_huge_target_in_float64():
    cal = acc.calibrate(1e300, 1e-5, clip=10, subset_size=50, temperature=2, n_gen=50,
                        max_tokens=40)
    assert 1e300 * (1 - 1e-9) <= cal.eps <= 1e300
    assert cal.temperature == pytest.approx(8e-298, rel=1e-9)  # τ = c/(s·ε/(2·2000))


def test_infinite_and_nan_inputs():
    assert acc.GaussianEvent(1e-200).rdp(np.array([2.0])).tolist() == [math.inf]
    assert acc.ExponentialMechanismEvent(math.inf).rdp(np.array([2.0])).tolist() == [math.inf]
    with pytest.raises(ValueError, match="rdp must be numbers >= 0"):
        acc.empirical_epsilon(math.nan, 2.0, 1e-5)
    with pytest.raises(ValueError, match="n_gen and max_tokens"):
        acc.theoretical_epsilon(10, 50, 2, math.nan, 40, 1e-5)
    with pytest.raises(ValueError, match="count must be a finite number"):
        acc.ComposedEvent(acc.ZCDPEvent(1.0), 10**400)
    with pytest.raises(ValueError, match="sensitivity"):
        acc.DPTokenEvent(10, 50, 5e-324)
    with pytest.raises(ValueError, match="target ε must be a finite number"):
        acc.calibrate(math.inf, 1e-5, clip=10, subset_size=50, temperature=2, n_gen=1,
                      max_tokens=1)


def test_mechanism_refuses_temperatures_and_clips_it_cannot_compute_with():
    clipped = mech.clip_logits(torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]]), 10.0)
    with pytest.raises(ValueError, match="too small"):
        mech.sampling_logprobs(mech.aggregate(clipped), 1e-320)
    with pytest.raises(ValueError, match="too small"):
        mech.leave_one_out_logprobs(clipped, 1e-320)
    with pytest.raises(ValueError, match="finite"):
        mech.sampling_logprobs(mech.aggregate(clipped), math.inf)
    with pytest.raises(ValueError, match="finite"):
        mech.clip_logits(clipped, math.inf)
