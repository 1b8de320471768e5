"""A setting whose leak or utility is not a finite number is skipped by the frontier: never on
the Pareto front, never recommended, never the "best", and named with its reason in the
result and the report (issue 84)."""

from __future__ import annotations

import math

import pytest

from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.methods.tradeoff.frontier import frontier, pareto_flags
from ctxleak.report.frontier import compact_rows, frontier_plots, notes

NAN, INF = math.nan, math.inf
N = 40  # questions per setting: enough for the frontier to recommend (30)


def _setting(lam, leak, f1):
    """A hand-built summary: λ, its leak above control (nats per token), its mean F1 (NaN and
    inf given as the summary's mean)."""
    scores = mean_with_ci([f1] * N) if math.isfinite(f1) else {"mean": f1, "ci_low": None,
                                                                 "ci_high": None}
    return {"setting": f"lambda={lam:g},T=0.8,context=all", "lambda": lam, "temperature": 0.8,
            "n": N, "f1": scores, "rouge_l": None,
            "influence_per_token": {"mean": 2 * leak if math.isfinite(leak) else leak},
            "control": {"enabled": True, "above_control_per_token": {"mean": leak}}}


def _front(*points):
    return frontier([_setting(lam, leak, f1) for lam, leak, f1 in points])


def test_a_nan_leak_listed_first_is_skipped_not_pareto_nor_recommended():
    front = _front((0, NAN, 0.9), (0.5, 0.4, 0.56), (1, 1.0, 0.6))
    rows = front["rows"]
    assert [r["pareto"] for r in rows] == [None, True, True]
    # by hand: best F1 0.6 (λ = 1); 90 % of it is 0.54; λ = 0.5 (0.56, leak 0.4) keeps it
    assert front["recommended"] == "lambda=0.5,T=0.8,context=all"
    assert rows[0]["utility_kept"] == pytest.approx(0.9 / 0.6)  # its F1 is finite
    assert front["skipped"] == [{"setting": "lambda=0,T=0.8,context=all", "label": "λ = 0",
                                 "reason": "influence above control per token is nan"}]
    line = notes(front)[-1]
    assert line.startswith("Skipped (a figure that is not a finite number") and \
        line.endswith("λ = 0 (influence above control per token is nan).")
    assert compact_rows(front)[0]["Pareto"] == "—" and compact_rows(front)[0]["recommended"] == ""


def test_one_nan_utility_does_not_read_as_every_f1_being_zero():
    front = _front((0, 0.1, NAN), (0.5, 0.4, 0.56), (1, 1.0, 0.6))
    assert "is 0" not in front["recommendation"]
    assert front["recommended"] == "lambda=0.5,T=0.8,context=all"
    assert front["recommendation"].startswith("λ = 0.5 keeps 93 % of the best F1")
    assert front["rows"][0]["pareto"] is None and front["rows"][0]["utility_kept"] is None
    assert front["skipped"][0]["reason"] == "F1 is nan"


def test_an_infinite_leak_or_utility_is_skipped_too():
    front = _front((0, INF, 0.9), (0.5, 0.4, INF), (1, 1.0, 0.6), (0.2, -INF, 0.7))
    assert [s["label"] for s in front["skipped"]] == ["λ = 0", "λ = 0.5", "λ = 0.2"]
    assert [s["reason"] for s in front["skipped"]] == [
        "influence above control per token is inf", "F1 is inf",
        "influence above control per token is -inf"]
    # the only setting left is the best and the least leaky: it keeps all of its F1
    assert [r["pareto"] for r in front["rows"]] == [None, None, True, None]
    assert front["recommended"] == "lambda=1,T=0.8,context=all"


def test_all_nan_recommends_nothing_and_says_why():
    front = _front((0, NAN, 0.5), (1, 0.3, NAN))
    assert front["recommended"] is None and len(front["skipped"]) == 2
    assert front["recommendation"] == ("No recommendation: every setting with figures was "
                                       "skipped (2 of 2: a leak or utility that is not a "
                                       "finite number).")
    assert all(r["pareto"] is None for r in front["rows"])


def test_the_plot_leaves_out_the_skipped_settings(monkeypatch):
    import ctxleak.report.plots as plots

    seen = {}
    monkeypatch.setattr(plots, "frontier_plot",
                        lambda points, **kw: seen.setdefault("points", points) and b"png")
    frontier_plots(_front((0, NAN, 0.9), (0.5, 0.4, 0.56), (1, 1.0, 0.6)))
    assert [p["label"] for p in seen["points"]] == ["λ = 0.5", "λ = 1"]


def test_pareto_flags_compare_no_point_that_is_not_finite():
    assert pareto_flags([(NAN, 0.9), (0.4, 0.5), (0.1, INF), (1.0, 0.6)]) == \
        [None, True, None, True]
