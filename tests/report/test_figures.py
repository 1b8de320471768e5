"""Figures: integer ticks on index axes, bootstrap error bars against λ and T, correlation in the
χ_F/χ_MC title, exact-match rate by template, the ICL heatmap of queries × exemplar positions."""

from __future__ import annotations

import pytest

from ctxleak.report import plots
from ctxleak.report.influence import sweep_plots
from ctxleak.report.probe import exact_match_by_template


@pytest.fixture
def ticks(monkeypatch):
    """The x ticks (and error-bar containers) of every figure rendered during the test."""
    seen: list[dict] = []
    real = plots._png

    def spy(fig):
        ax = fig.axes[0]
        fig.canvas.draw()
        seen.append({"xticks": [t for t in ax.get_xticks()
                                if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]],
                     "errorbars": len(ax.containers), "title": ax.get_title()})
        return real(fig)

    monkeypatch.setattr(plots, "_png", spy)
    return seen


def test_index_axes_have_integer_ticks(ticks):
    series = {"a": ([1, 2, 3], [0.1, 0.3, 0.2])}
    plots.line_plot(series, title="t", xlabel="i", ylabel="y")
    plots.line_plot(series, title="t", xlabel="i", ylabel="y", integer_x=True)
    assert any(t != int(t) for t in ticks[0]["xticks"])  # matplotlib's default: 1.5, 2.5
    assert ticks[1]["xticks"] and all(t == int(t) for t in ticks[1]["xticks"])


def _setting(lam, t, mean):
    return {"setting": f"{lam}/{t}", "lambda": lam, "temperature": t, "n": 3,
            "influence": {"mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.2},
            "per_position_influence": [mean], "mean_context_tokens": 10.0}


def test_sweeps_against_lambda_and_t_have_error_bars(ticks):
    both = [_setting(lam, t, lam * t) for t in (0.5, 1.0) for lam in (0.5, 1.0, 1.5)]
    out = sweep_plots(both)
    assert set(out) == {"lambda_sweep.png", "temperature_sweep.png"}
    assert [s["errorbars"] for s in ticks] == [2, 3]  # error bars for each line (T; λ)
    assert set(sweep_plots([_setting(lam, 0.8, lam) for lam in (0.5, 1.0)])) == \
        {"lambda_sweep.png"}
    assert sweep_plots([_setting(1.0, 0.8, 1.0)]) == {}
    with pytest.raises(ValueError, match="bounds"):
        plots.line_plot({"a": ([1, 2], [1, 2])}, intervals={"a": ([0], [3, 3])}, title="t",
                        xlabel="x", ylabel="y")


def test_correlation_in_the_title():
    title = plots.correlation_title("χ", [1, 2, 3, 4], [2, 4, 6, 9])
    assert title.startswith("χ\nPearson r = 0.99, Spearman ρ = 1.00 (n = 4)")
    assert plots.correlation_title("χ", [1, 1, 1], [1, 2, 3]) == "χ"  # constant: undefined
    assert plots.correlation_title("χ", [1, 2], [1, 2]) == "χ"


def test_exact_match_by_template():
    rows = [{"template": "a", "exact_match": True}, {"template": "a", "exact_match": False},
            {"template": "b", "exact_match": False}, {"template": "c", "exact_match": None}]
    assert exact_match_by_template(rows) == {"a": 0.5, "b": 0.0}


def test_icl_heatmap_rows_are_queries_and_columns_positions(monkeypatch):
    from ctxleak.report import icl

    seen = {}

    def fake(matrix, **kw):
        seen.update(matrix=matrix, **kw)
        return b""

    monkeypatch.setattr(plots, "heatmap_plot", fake)
    records = [{"id": "q1", "variants": {"labels": {"loss_by_position": [0.1, 0.2]}}},
               {"id": "q2", "variants": {"labels": {"loss_by_position": [0.3]}}},
               {"id": "q3", "variants": {"labels": {"loss_by_position": [0.5, 0.6]}}}]
    icl.loss_heatmap(records, "labels")
    assert seen["matrix"] == [[0.1, 0.2], [0.5, 0.6]]  # the largest shot count only
    assert seen["row_labels"] == ["q1", "q3"] and seen["col_labels"] == ["1", "2"]


def test_frontier_labels_of_coinciding_points_are_one_and_none_covers_another(monkeypatch):
    """Four settings at one place (DP votes that never release) get one label of four lines;
    labels of points too close to hold both side by side are stacked without overlapping, as
    matplotlib measures the drawn text."""
    from ctxleak.report.frontier import short_label

    seen: list = []
    real = plots._png

    def spy(fig):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        seen.extend((t.get_text(), t.get_window_extent(renderer)) for t in fig.axes[0].texts)
        return real(fig)

    monkeypatch.setattr(plots, "_png", spy)
    votes = [{"x": 0.08, "y": 0.009, "label": f"vote {k}"} for k in range(4)]
    near = [{"x": 0.0, "y": 0.0, "label": "λ = 0"}, {"x": 0.005, "y": 0.0, "label": "λ = 1, ε = 2"},
            {"x": 0.03, "y": 0.0, "label": "λ = 1, ε = 8"}, {"x": 1.1, "y": 0.02, "label": "λ = 1"}]
    plots.frontier_plot(votes + near, title="t", xlabel="x", ylabel="y")
    texts = [t for t, _ in seen]
    assert sorted(texts) == sorted(["vote 0\nvote 1\nvote 2\nvote 3", "λ = 0", "λ = 1, ε = 2",
                                    "λ = 1, ε = 8", "λ = 1"])
    boxes = [box for _, box in seen]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    assert short_label("dp-vote(eps=2,shards=4,delta=0.0001)") == "dp-vote eps=2,shards=4"
    assert short_label("dp-rag(eps=5,delta=0.001)") == "dp-rag eps=5"
    assert short_label("λ = 1, ε = 2") == "λ = 1, ε = 2"


def test_a_pareto_point_is_drawn_over_a_hollow_one_at_the_same_place(monkeypatch):
    """Two settings with the same figures, one on the Pareto front and one not (bounded CID at
    λ = 1 and λ = 0.75 when ε binds at every token): the filled marker is drawn last, so the
    plot shows the point as on the front, whatever order the settings came in."""
    from matplotlib.colors import to_rgba

    faces: list = []
    real = plots._png

    def spy(fig):
        faces.extend(to_rgba(line.get_markerfacecolor()) for line in fig.axes[0].lines
                     if line.get_marker() == "o")
        return real(fig)

    monkeypatch.setattr(plots, "_png", spy)
    on, off = ({"x": 0.0, "y": 0.5, "label": label, "marked": marked}
               for label, marked in (("λ = 1, ε = 2", True), ("λ = 0.75, ε = 2", False)))
    white = to_rgba("white")
    for order in ([on, off], [off, on]):
        faces.clear()
        plots.frontier_plot(order, title="t", xlabel="x", ylabel="y")
        assert len(faces) == 2 and faces[0] == white and faces[1] != white
