"""Plots for run reports, returned as PNG bytes (plots as PNG, embedded in report.html).

matplotlib (and scipy) are imported lazily inside the functions, so ``import ctxleak`` stays light.
Figures are built with :class:`matplotlib.figure.Figure` on an explicit Agg canvas: no pyplot, no
global backend switch, no figure registry to leak into, safe to call from worker threads.

Output is deterministic for a given matplotlib version: fixed figure size and dpi, fixed style
(``rcParams`` defaults under ``rc_context``), and no "Software" version stamp in the PNG metadata.
Labels are treated as plain text (every ``$`` escaped), so untrusted strings never reach mathtext.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ctxleak.methods.stats import kde_reason

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_FIGSIZE = (6.4, 4.0)  # inches
_DPI = 100
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf"]


@contextmanager
def _figure(figsize: tuple[float, float] = _FIGSIZE) -> Iterator[tuple[Any, Any]]:
    """Yield ``(fig, ax)`` on a fresh Agg canvas with a fixed, user-config-independent style."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # the Agg backend, chosen here
    from matplotlib.figure import Figure

    rc = dict(matplotlib.rcParamsDefault)
    rc.pop("backend", None)  # don't touch the process-wide backend
    rc.update({"text.usetex": False, "font.family": "DejaVu Sans",
               "axes.grid": True, "grid.alpha": 0.3, "savefig.dpi": _DPI})
    with matplotlib.rc_context(rc):
        fig = Figure(figsize=figsize, dpi=_DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        try:
            yield fig, ax
        finally:
            fig.clear()


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes, laid out tight. What matplotlib would warn about while drawing
    is handled here instead of printed: labels too long for a tight layout get a canvas grown to
    fit them, and a character the font lacks is drawn as a box (tables show the text itself)."""
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.tight_layout()
        grow = any("Tight layout not applied" in str(w.message) for w in caught)
        fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None},
                    **({"bbox_inches": "tight"} if grow else {}))
    for w in caught:
        text = str(w.message)
        if not ("Tight layout not applied" in text or text.startswith("Glyph ")):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return buf.getvalue()


def _t(text: Any) -> str:
    """User text as a literal matplotlib string: every ``$`` escaped so mathtext never runs
    (matplotlib turns ``\\$`` back into ``$``), and a leading ``_`` (which hides a legend entry)
    shielded by a space."""
    s = str(text).replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def _label(ax: Any, title: str, xlabel: str | None = None, ylabel: str | None = None) -> None:
    ax.set_title(_t(title))
    if xlabel is not None:
        ax.set_xlabel(_t(xlabel))
    if ylabel is not None:
        ax.set_ylabel(_t(ylabel))


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")


def _floats(values: Sequence[Any], what: str) -> list[float]:
    try:
        return [float(v) if v is not None else math.nan for v in values]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: values must be numbers ({exc})") from None


def position_curve(values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """A per-position series as ``(x, y)`` for :func:`line_plot`: position i + 1 against value
    i, the positions without a value (None) left out."""
    pts = [(i + 1, v) for i, v in enumerate(values) if v is not None]
    return [float(x) for x, _ in pts], [float(v) for _, v in pts]


def line_plot(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, title: str,
              xlabel: str, ylabel: str, logx: bool = False, logy: bool = False,
              errors: Mapping[str, Sequence[float]] | None = None,
              intervals: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
              integer_x: bool = False) -> bytes:
    """Line plot of named ``(x, y)`` series; ``errors[name]`` draws a ±error band,
    ``intervals[name] = (lows, highs)`` error bars from each point's interval (e.g. a bootstrap
    CI); ``integer_x`` puts ticks on whole numbers only (an index axis). Returns PNG bytes."""
    with _figure() as (fig, ax):
        if integer_x:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        drawn = False
        for i, (name, (xs, ys)) in enumerate(series.items()):
            x, y = _floats(xs, f"series {name!r} x"), _floats(ys, f"series {name!r} y")
            if len(x) != len(y):
                raise ValueError(f"series {name!r}: {len(x)} x values but {len(y)} y values")
            color = _PALETTE[i % len(_PALETTE)]
            ax.plot(x, y, marker="o" if len(x) <= 30 else None, markersize=3, color=color,
                    label=_t(name))
            drawn = drawn or bool(x)
            if errors is not None and name in errors:
                e = _floats(errors[name], f"errors {name!r}")
                if len(e) != len(y):
                    raise ValueError(f"errors {name!r}: {len(e)} values for {len(y)} points")
                lo = [a - b for a, b in zip(y, e)]
                hi = [a + b for a, b in zip(y, e)]
                if logy:  # keep the band drawable on a log axis
                    lo = [v if v > 0 else math.nan for v in lo]
                ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
            if intervals is not None and name in intervals:
                lows = _floats(intervals[name][0], f"intervals {name!r} low")
                highs = _floats(intervals[name][1], f"intervals {name!r} high")
                if not len(lows) == len(highs) == len(y):
                    raise ValueError(f"intervals {name!r}: {len(lows)}/{len(highs)} bounds for "
                                     f"{len(y)} points")
                below = [max(a - b, 0.0) if math.isfinite(b) else 0.0 for a, b in zip(y, lows)]
                above = [max(b - a, 0.0) if math.isfinite(b) else 0.0 for a, b in zip(y, highs)]
                ax.errorbar(x, y, yerr=[below, above], fmt="none", ecolor=color, capsize=3,
                            linewidth=1)
        if logx and drawn:
            ax.set_xscale("log")
        if logy and drawn:
            ax.set_yscale("log")
        elif drawn:
            _constant_ylim(ax, [v for _, ys in series.values()
                                for v in _floats(ys, "y")])
        if not drawn:
            _no_data(ax)
        elif len(series) > 1:
            ax.legend(loc="best", fontsize="small")
        _label(ax, title, xlabel, ylabel)
        return _png(fig)


def _constant_ylim(ax: Any, values: Sequence[float]) -> None:
    """A y axis that reads for a constant series: centred on the value with a visible margin
    (not matplotlib's ±1e-7 "offset" ticks), plain tick labels."""
    finite = [v for v in values if math.isfinite(v)]
    if finite and min(finite) == max(finite):
        c = finite[0]
        pad = abs(c) * 0.5 if c != 0 else 1.0
        ax.set_ylim(c - pad, c + pad)
    ax.ticklabel_format(axis="y", useOffset=False)


def scatter_plot(x: Sequence[float], y: Sequence[float], *, labels: Sequence[str] | None = None,
                 title: str, xlabel: str, ylabel: str, diagonal: bool = False) -> bytes:
    """Scatter of ``y`` against ``x``. ``labels`` (one per point) colours points by group with a
    legend; ``diagonal`` draws the line y = x. Returns PNG bytes."""
    xs, ys = _floats(x, "x"), _floats(y, "y")
    if len(xs) != len(ys):
        raise ValueError(f"scatter_plot: {len(xs)} x values but {len(ys)} y values")
    if labels is not None and len(labels) != len(xs):
        raise ValueError(f"scatter_plot: {len(labels)} labels for {len(xs)} points")
    with _figure() as (fig, ax):
        if not xs:
            _no_data(ax)
        elif labels is None:
            ax.scatter(xs, ys, s=14, alpha=0.7, color=_PALETTE[0])
        else:
            groups: dict[str, list[int]] = {}
            for i, lab in enumerate(labels):
                groups.setdefault(str(lab), []).append(i)
            for g, (name, idx) in enumerate(groups.items()):
                ax.scatter([xs[i] for i in idx], [ys[i] for i in idx], s=14, alpha=0.7,
                           color=_PALETTE[g % len(_PALETTE)], label=_t(name))
            ax.legend(loc="best", fontsize="small")
        if diagonal:
            finite = [v for v in xs + ys if math.isfinite(v)]
            if finite:
                lo, hi = min(finite), max(finite)
                if lo == hi:
                    lo, hi = lo - 1.0, hi + 1.0
                ax.plot([lo, hi], [lo, hi], linestyle="--", color="gray", linewidth=1)
        _label(ax, title, xlabel, ylabel)
        return _png(fig)


def frontier_plot(points: Sequence[Mapping[str, Any]], *, title: str, xlabel: str,
                  ylabel: str) -> bytes:
    """One labelled point per setting at ``(x, y)``; error bars from ``x_low``/``x_high`` and
    ``y_low``/``y_high`` where a point has them (None: no bar); ``marked`` points (the Pareto
    front) filled and joined in order of x, the others hollow. Returns PNG bytes."""
    pts = [p for p in points if p.get("x") is not None and p.get("y") is not None]
    with _figure() as (fig, ax):
        if not pts:
            _no_data(ax)
        for p in drawing_order(pts):
            x, y = float(p["x"]), float(p["y"])
            marked = bool(p.get("marked"))
            xerr = _bar(x, p.get("x_low"), p.get("x_high"))
            yerr = _bar(y, p.get("y_low"), p.get("y_high"))
            if xerr is not None or yerr is not None:
                ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor="gray",
                            capsize=3, linewidth=1)
            ax.plot([x], [y], marker="o", markersize=7, linestyle="none", color=_PALETTE[0],
                    markerfacecolor=_PALETTE[0] if marked else "white")
        ax.margins(0.15)  # room for the labels of the outermost points
        _point_labels(ax, pts)
        front = sorted((float(p["x"]), float(p["y"])) for p in pts if p.get("marked"))
        if len(front) > 1:
            ax.plot([a for a, _ in front], [b for _, b in front], color=_PALETTE[0],
                    linewidth=1, linestyle="--", label="Pareto front (filled)")
            ax.legend(loc="best", fontsize="small")
        _label(ax, title, xlabel, ylabel)
        return _png(fig)


def drawing_order(pts: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The hollow points first, then the ``marked`` (filled) ones, each in the given order:
    where a setting off the front coincides with one on it (two settings with the same
    figures), the filled marker is drawn last, on top."""
    return sorted(pts, key=lambda p: bool(p.get("marked")))


def _point_labels(ax: Any, pts: Sequence[Mapping[str, Any]]) -> None:
    """One label per place: the labels of points that coincide are one label, a line each;
    a label that would cover one already placed moves up until it does not (boxes estimated
    from the characters, in points, small font). Written here: matplotlib places annotations
    where told and has no overlap avoidance of its own."""
    places: dict[tuple[float, float], list[str]] = {}
    for p in pts:
        places.setdefault((float(p["x"]), float(p["y"])), []).append(_t(p.get("label", "")))
    ax.autoscale_view()
    scale = 72.0 / ax.figure.dpi  # display pixels to points
    taken: list[tuple[float, float, float, float]] = []
    for (x, y), labels in sorted(places.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        text = "\n".join(dict.fromkeys(labels))
        px, py = (float(v) * scale for v in ax.transData.transform((x, y)))
        width = 4.8 * max(len(line) for line in text.split("\n"))
        height = 10.0 * (text.count("\n") + 1)
        dy = 5.0
        while any(px + 5 < r and px + 5 + width > left and py + dy < top and
                  py + dy + height > bottom for left, bottom, r, top in taken):
            dy += 4.0
        taken.append((px + 5, py + dy, px + 5 + width, py + dy + height))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy),
                    fontsize="small")


def _bar(v: float, low: Any, high: Any) -> list[list[float]] | None:
    """matplotlib's asymmetric error of one point from its interval; None without one."""
    if low is None or high is None:
        return None
    return [[max(v - float(low), 0.0)], [max(float(high) - v, 0.0)]]


def correlation_title(title: str, x: Sequence[float], y: Sequence[float]) -> str:
    """``title`` with the Pearson and Spearman correlations of the finite (x, y) pairs
    appended (left alone with fewer than 3 pairs or a constant side)."""
    import numpy as np
    from scipy import stats

    pairs = [(a, b) for a, b in zip(_floats(x, "x"), _floats(y, "y"))
             if math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return title
    xs, ys = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    r = float(stats.pearsonr(xs, ys)[0])
    rho = float(stats.spearmanr(xs, ys)[0])
    return f"{title}\nPearson r = {r:.2f}, Spearman ρ = {rho:.2f} (n = {len(pairs)})"


def bar_plot(categories: Sequence[str], values: Sequence[float], *, title: str, ylabel: str,
             errors: Sequence[float] | None = None) -> bytes:
    """Bar chart, one bar per category, optional error bars. Returns PNG bytes."""
    cats = [str(c) for c in categories]
    vals = _floats(values, "values")
    if len(cats) != len(vals):
        raise ValueError(f"bar_plot: {len(cats)} categories but {len(vals)} values")
    errs = None
    if errors is not None:
        errs = _floats(errors, "errors")
        if len(errs) != len(vals):
            raise ValueError(f"bar_plot: {len(errs)} errors for {len(vals)} values")
    with _figure() as (fig, ax):
        if not cats:
            _no_data(ax)
        else:
            pos = list(range(len(cats)))
            ax.bar(pos, vals, yerr=errs, capsize=3 if errs is not None else 0, color=_PALETTE[0])
            ax.set_xticks(pos)
            rotate = len(cats) > 6 or max(len(c) for c in cats) > 10
            ax.set_xticklabels([_t(c) for c in cats], rotation=45 if rotate else 0,
                               ha="right" if rotate else "center")
            ax.grid(axis="x", visible=False)
            ax.ticklabel_format(axis="y", useOffset=False)
        _label(ax, title, None, ylabel)
        return _png(fig)


def grouped_bar_plot(categories: Sequence[str], series: Mapping[str, Sequence[float]], *,
                     title: str, ylabel: str) -> bytes:
    """Bars of several named series side by side in each category (e.g. one per run), with a
    legend. Returns PNG bytes."""
    cats = [str(c) for c in categories]
    vals = {str(k): _floats(v, f"series {k!r}") for k, v in series.items()}
    for name, v in vals.items():
        if len(v) != len(cats):
            raise ValueError(f"grouped_bar_plot: series {name!r} has {len(v)} values for "
                             f"{len(cats)} categories")
    with _figure() as (fig, ax):
        if not cats or not vals:
            _no_data(ax)
        else:
            width = 0.8 / len(vals)
            for k, (name, v) in enumerate(vals.items()):
                pos = [i - 0.4 + width * (k + 0.5) for i in range(len(cats))]
                ax.bar(pos, v, width=width, color=_PALETTE[k % len(_PALETTE)], label=_t(name))
            ax.set_xticks(range(len(cats)))
            rotate = len(cats) > 6 or max(len(c) for c in cats) > 10
            ax.set_xticklabels([_t(c) for c in cats], rotation=45 if rotate else 0,
                               ha="right" if rotate else "center")
            ax.grid(axis="x", visible=False)
            ax.legend(loc="best", fontsize="small")
        _label(ax, title, None, ylabel)
        return _png(fig)


def density_plot(samples: Mapping[str, Sequence[float]], *, title: str, xlabel: str,
                 means: bool = True) -> bytes:
    """Density of each named sample: Gaussian KDE (scipy.stats), or a histogram and a rug of the
    values when a sample has fewer than :data:`ctxleak.methods.stats.MIN_KDE_DISTINCT` distinct
    finite values (or its KDE is singular), the reason in its legend entry; each sample's mean
    as a dashed line (as in ProPILE, Fig. 3). Non-finite values are dropped. Returns PNG
    bytes."""
    clean = {str(k): [v for v in _floats(vs, f"samples {k!r}") if math.isfinite(v)]
             for k, vs in samples.items()}
    allv = [v for vs in clean.values() for v in vs]
    with _figure() as (fig, ax):
        if not allv:
            _no_data(ax)
        else:
            lo, hi = min(allv), max(allv)
            pad = (hi - lo) * 0.1 if hi > lo else max(abs(lo) * 0.1, 1.0)
            lo, hi = lo - pad, hi + pad
            grid = [lo + (hi - lo) * i / 399 for i in range(400)]
            for i, (name, vs) in enumerate(clean.items()):
                if not vs:
                    continue
                color = _PALETTE[i % len(_PALETTE)]
                why = kde_reason(vs)
                density = _kde(vs, grid) if why is None else None
                if density is not None:
                    ax.plot(grid, density, color=color, label=_t(name))
                    ax.fill_between(grid, density, color=color, alpha=0.15, linewidth=0)
                else:  # too few distinct values for a density: the values themselves
                    bins = 1 if len(set(vs)) < 2 else min(30, max(5, len(vs) // 2))
                    rng = (vs[0] - pad / 2, vs[0] + pad / 2) if len(set(vs)) < 2 else None
                    ax.hist(vs, bins=bins, range=rng, density=True, alpha=0.4, color=color,
                            label=_t(f"{name}: histogram of {len(vs)} values"
                                     + (f" ({why})" if why else "")))
                    ax.plot(vs, [0.0] * len(vs), linestyle="none", marker="|", markersize=14,
                            color=color)
                if means:
                    mean = sum(vs) / len(vs)
                    ax.axvline(mean, color=color, linestyle="--", linewidth=1.2,
                               label=_t(f"mean {name} = {mean:.3g}"))
            ax.set_xlim(lo, hi)
            ax.legend(loc="best", fontsize="small")
        _label(ax, title, xlabel, "density")
        return _png(fig)


def _kde(values: list[float], grid: list[float]) -> list[float] | None:
    import numpy as np
    from scipy import stats

    try:
        return stats.gaussian_kde(np.asarray(values, dtype=float))(np.asarray(grid)).tolist()
    except (np.linalg.LinAlgError, ValueError):
        return None


def heatmap_plot(matrix: Sequence[Sequence[float]], *, row_labels: Sequence[str],
                 col_labels: Sequence[str], title: str, xlabel: str | None = None,
                 ylabel: str | None = None) -> bytes:
    """Matrix heatmap with a colour bar; cells are annotated when the matrix is small (≤ 15×15).
    NaN cells are left blank. Returns PNG bytes."""
    import numpy as np

    rows = [_floats(r, f"matrix row {i}") for i, r in enumerate(matrix)]
    if any(len(r) != len(col_labels) for r in rows) or len(rows) != len(row_labels):
        raise ValueError(f"heatmap_plot: matrix shape does not match {len(row_labels)} row labels "
                         f"× {len(col_labels)} column labels")
    n_r, n_c = len(rows), len(col_labels)
    size = (max(5.5, min(12.0, 1.5 + 0.45 * n_c)), max(3.0, min(10.0, 1.2 + 0.4 * n_r)))
    with _figure(size) as (fig, ax):
        if n_r == 0 or n_c == 0:
            _no_data(ax)
        else:
            data = np.ma.masked_invalid(np.asarray(rows, dtype=float))
            im = ax.imshow(data, aspect="auto", cmap="viridis", interpolation="nearest")
            fig.colorbar(im, ax=ax)
            ax.set_xticks(range(n_c))
            ax.set_xticklabels([_t(c) for c in col_labels], rotation=45 if n_c > 4 else 0,
                               ha="right" if n_c > 4 else "center")
            ax.set_yticks(range(n_r))
            ax.set_yticklabels([_t(r) for r in row_labels])
            ax.grid(False)
            if n_r <= 15 and n_c <= 15 and data.count():
                mid = (float(data.min()) + float(data.max())) / 2
                for i in range(n_r):
                    for j in range(n_c):
                        v = rows[i][j]
                        if math.isfinite(v):
                            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                                    color="black" if v > mid else "white")
        _label(ax, title, xlabel, ylabel)
        return _png(fig)


__all__ = ["PNG_SIGNATURE", "bar_plot", "correlation_title", "density_plot", "grouped_bar_plot",
           "heatmap_plot", "line_plot", "scatter_plot"]
