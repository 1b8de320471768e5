"""Figures whose labels matplotlib cannot lay out print none of its raw warnings (with
ctxleak's source line): labels too long for a tight layout get a canvas that fits them, and a
character the font lacks is drawn as a box without a word."""

from __future__ import annotations

import io
import warnings

import pytest

from ctxleak.report import plots

LONG = "a model label far longer than any figure is wide " * 3


def _figures():
    return {
        # the example: compare's bar of runs named by long labels
        "long-bars": lambda: plots.bar_plot([LONG + "1", LONG + "2", LONG + "3"], [1, 2, 3],
                                            title="influence by run", ylabel="nats"),
        "long-rows": lambda: plots.heatmap_plot([[1, 2], [3, 4]], row_labels=[LONG, LONG + "x"],
                                                col_labels=["a", "b"], title="loss"),
        "missing-glyphs": lambda: plots.bar_plot(["模型一", "模型二"], [1, 2], title="runs",
                                                 ylabel="nats"),
    }


@pytest.mark.parametrize("case", sorted(_figures()))
def test_no_raw_matplotlib_warning(case):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        png = _figures()[case]()
    assert not caught, [str(w.message) for w in caught]
    assert png.startswith(plots.PNG_SIGNATURE)


def test_long_labels_fit_on_a_grown_canvas():
    from PIL import Image

    wide = Image.open(io.BytesIO(_figures()["long-rows"]()))
    plain = Image.open(io.BytesIO(plots.heatmap_plot([[1, 2], [3, 4]], row_labels=["a", "b"],
                                                     col_labels=["a", "b"], title="loss")))
    assert wide.size[0] > plain.size[0]  # the labels are drawn, not cut at the edge
