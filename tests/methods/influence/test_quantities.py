"""The quantities of paper 000 (Def. 3.1-3.3), Fisher χ (paper 002) and the minimum-length EOS
mask, each defined once, on values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ctxleak.engine.streams import mask_eos_before_min
from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.methods.influence.quantities import expected_influence
from ctxleak.methods.susceptibility.fisher import fisher_chi
from ctxleak.mitigations.influence import response_influence, token_influence


def test_token_and_response_influence_by_hand():
    with_ctx = [math.log(0.5), math.log(0.25), math.log(0.9)]
    without = [math.log(0.25), math.log(0.5), math.log(0.9)]
    tau = token_influence(with_ctx, without)
    assert tau.dtype == np.float64
    assert tau == pytest.approx([math.log(2), math.log(2), 0.0])
    assert response_influence(tau) == pytest.approx(2 * math.log(2))
    assert isinstance(response_influence(tau), float)
    # one row per window: [windows, T] against [T]
    rows = token_influence(np.array(with_ctx)[None, :], np.array([without, with_ctx]))
    assert rows.shape == (2, 3)
    assert response_influence(rows) == pytest.approx([2 * math.log(2), 0.0])


def test_expected_influence_is_the_dataset_mean():
    stats = expected_influence([1.0, 2.0, 6.0], seed=0)
    assert stats["mean"] == pytest.approx(3.0) and stats["median"] == 2.0 and stats["n"] == 3
    # three examples cannot carry a bootstrap interval (honest statistics: none, with why)
    assert stats["ci_low"] is None and stats["ci_reason"]


def test_fisher_chi_is_half_sigma2_trace():
    assert fisher_chi(4.0, 1.0) == 2.0 and fisher_chi(4.0, 0.5) == 1.0


def test_eos_mask_in_generation_and_in_scoring():
    step_logits = torch.zeros(2, 5, dtype=torch.float64)  # two streams at one step
    mask_eos_before_min(step_logits, [3], 2, step=1)
    assert (step_logits[:, 3] == MASKED_LOGIT).all() and (step_logits[:, :3] == 0).all()
    late = torch.zeros(2, 5, dtype=torch.float64)
    mask_eos_before_min(late, [3], 2, step=2)
    assert (late == 0).all()
    positions = torch.zeros(4, 5, dtype=torch.float64)  # response positions 0..3
    mask_eos_before_min(positions, [3, 4], 2)
    assert (positions[:2, 3:] == MASKED_LOGIT).all() and (positions[2:] == 0).all()
    assert (positions[:, :3] == 0).all()
    untouched = torch.zeros(3, 5)
    assert mask_eos_before_min(untouched, [], 5) is untouched and (untouched == 0).all()
