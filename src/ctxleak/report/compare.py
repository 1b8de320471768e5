"""Figures and the HTML report of ``ctxleak compare``: each method's headline figures with one line
(or bar) per run (Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models,
Fig. 2c/3/4/8; Evaluating Privacy Leakage From In-Context Learning, Fig. 1/3/6; Efficiently
Computing Susceptibility to Context in Language Models across models; ProPILE: Probing Privacy
Leakage in Large Language Models exact match)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.report import Report, plots


def influence_figures(results: Sequence[Any], labels: Sequence[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    first = [(lab, (r.summary.get("settings") or [None])[0]) for lab, r in zip(labels, results)]
    first = [(lab, s) for lab, s in first if s]
    out["compare_per_position.png"] = plots.line_plot(
        {lab: plots.position_curve(s["per_position_influence"]) for lab, s in first},
        title="Influence of the t-th generated token (Fig. 2c), first setting",
        xlabel="token position t", ylabel="mean token influence", integer_x=True)
    windows = [(lab, s) for lab, s in first if s.get("per_window_influence")]
    if windows:
        out["compare_per_window.png"] = plots.line_plot(
            {lab: plots.position_curve(s["per_window_influence"]) for lab, s in windows},
            title="Influence of the i-th context n-gram (Fig. 3), first setting",
            xlabel="window index i", ylabel="mean response influence", integer_x=True)
    series, bounds = {}, {}
    for lab, r in zip(labels, results):
        settings = sorted(r.summary.get("settings") or [], key=lambda s: (s["temperature"],
                                                                         s["lambda"]))
        series[lab] = ([s["lambda"] for s in settings], [s["influence"]["mean"] for s in settings])
        bounds[lab] = ([_num(s["influence"].get("ci_low")) for s in settings],
                       [_num(s["influence"].get("ci_high")) for s in settings])
    if any(len(xs) > 1 for xs, _ in series.values()):
        out["compare_lambda.png"] = plots.line_plot(
            series, intervals=bounds, title="Influence against λ (Fig. 8), 95% bootstrap CI",
            xlabel="λ", ylabel="expected influence")
    sizes: list[Any] = [((r.provenance.get("model") or {}).get("parameters")) for r in results]
    if all(sizes) and len(set(sizes)) == len(sizes):
        order = sorted(range(len(results)), key=lambda i: sizes[i])
        by_setting: dict[str, tuple[list[float], list[float]]] = {}
        ci: dict[str, tuple[list[float], list[float]]] = {}
        for i in order:
            for s in results[i].summary.get("settings") or []:
                name = f"λ={s['lambda']:g}, T={s['temperature']:g}" + (
                    "" if s.get("bounded_eps") is None else f", ε={s['bounded_eps']:g}")
                xs, ys = by_setting.setdefault(name, ([], []))
                lo, hi = ci.setdefault(name, ([], []))
                xs.append(float(sizes[i]))
                ys.append(s["influence"]["mean"])
                lo.append(_num(s["influence"].get("ci_low")))
                hi.append(_num(s["influence"].get("ci_high")))
        out["compare_model_size.png"] = plots.line_plot(
            by_setting, intervals=ci, logx=True, title="Influence against model size (Fig. 4): "
            + ", ".join(labels[i] for i in order), xlabel="model parameters",
            ylabel="expected influence")
    return out


def icl_figures(results: Sequence[Any], labels: Sequence[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    shots, by_pos, errors = {}, {}, {}
    for lab, r in zip(labels, results):
        iclinf = r.summary.get("iclinf") or {}
        if not iclinf:
            continue
        variant = next(iter(next(iter(iclinf.values()))))
        ns = sorted(iclinf, key=int)
        shots[lab] = ([int(n) for n in ns], [iclinf[n][variant]["iclinf_mean"] for n in ns])
        errors[lab] = [iclinf[n][variant]["iclinf_std"] for n in ns]
        curve = iclinf[ns[-1]][variant]["mean_loss_by_position"]
        by_pos[f"{lab}, {ns[-1]} shots"] = (list(range(1, len(curve) + 1)), curve)
    out["compare_loss_by_position.png"] = plots.line_plot(
        by_pos, title="Mean privacy loss by position of the removed exemplar (Fig. 1)",
        xlabel="exemplar position i", ylabel="mean loss_i", integer_x=True)
    out["compare_shots.png"] = plots.line_plot(
        shots, errors=errors, title="ICLInf against the number of exemplars (Fig. 3)",
        xlabel="number of shots", ylabel="ICLInf (mean ± std)", integer_x=True)
    return out


def audit_figures(results: Sequence[Any], labels: Sequence[str]) -> dict[str, bytes]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    targets: set[float] = set()
    for lab, r in zip(labels, results):
        rows = r.summary.get("rows") or []
        first = rows[0]["delta"] if rows else None
        pts = [(x["target_eps"], x["eps_empirical"]) for x in rows if x["delta"] == first
               and x["eps_empirical"] is not None and x["eps_empirical"] > 0]
        series[lab] = ([p[0] for p in pts], [p[1] for p in pts])
        targets.update(x["target_eps"] for x in rows)
    series["ε_empirical = ε_target"] = (sorted(targets), sorted(targets))
    return {"compare_fig6.png": plots.line_plot(
        series, title="Target ε vs ε_empirical (Fig. 6), first δ", xlabel="target ε",
        ylabel="ε_empirical", logx=True, logy=True)}


def susceptibility_figures(results: Sequence[Any], labels: Sequence[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, name in (("chi_mc", "χ_MC"), ("chi_mc_nocontext", "χ_MC (no-context ref.)"),
                      ("chi_f", "χ_F")):
        if not any(key in (r.summary.get("metrics") or {}) for r in results):
            continue
        for block, what in (("by_relation", "relation"), ("by_query_type", "query type")):
            cats: list[str] = []
            for r in results:
                cats += [c for c in (r.summary.get("means") or {}).get(block, {}) if c not in cats]
            values = {lab: [_mean(r, block, c, key) for c in cats]
                      for lab, r in zip(labels, results)}
            out[f"compare_{key}_{block}.png"] = plots.grouped_bar_plot(
                cats, values, title=f"Mean {name} by {what}, per model", ylabel=name)
    return out


def probe_figures(results: Sequence[Any], labels: Sequence[str]) -> dict[str, bytes]:
    groups: list[str] = []
    for r in results:
        groups += [g["label"] for g in r.summary.get("groups") or [] if g["label"] not in groups]
    values: dict[str, list[Any]] = {}
    for lab, r in zip(labels, results):
        by = {g["label"]: g.get("exact_match_rate") for g in r.summary.get("groups") or []}
        values[lab] = [by.get(g) for g in groups]
    return {"compare_exact_match.png": plots.grouped_bar_plot(
        groups, values, title="Exact-match rate by group, per model", ylabel="exact-match rate")}


def paired_rows(comparison: Any) -> list[dict[str, Any]]:
    """The paired table as shown: per comparison and quantity, the examples paired, each
    side's mean, the mean difference left − right with its 95% t interval, the two-sided
    Wilcoxon signed-rank p, "—" and the reason where n cannot support a figure."""
    out = []
    for c in comparison.contrasts:
        for s in c.stats:
            ci = "—" if s["ci low"] is None else f"[{_g(s['ci low'])}, {_g(s['ci high'])}]"
            sizes = len(c.units) + c.only_left, len(c.units) + c.only_right
            out.append({"comparison": s["comparison"],
                        "quantity": f"{s['quantity']} ({s['unit']})",
                        "pairs": f"{len(c.units)} (of {sizes[0]} and {sizes[1]})",
                        "left mean": _g(s["left mean"]), "right mean": _g(s["right mean"]),
                        "mean difference (left − right)": _g(s["mean difference"]),
                        "95% CI (t)": ci,
                        "Wilcoxon p (two-sided)": "—" if s["wilcoxon p"] is None
                        else f"{s['wilcoxon p']:.3g}",
                        "why —": s["note"] or ""})
    return out


PAIRED_TEXT = ("Each example is paired across the two sides by its id (and setting): "
               "the difference is left − right per example; the interval is the mean "
               "difference ± t × its standard error (95%); the Wilcoxon signed-rank test asks "
               "whether the differences are centred on 0. A figure n cannot support is "
               "shown as —, with the reason.")


def compare_report(method: str, results: Sequence[Any], labels: Sequence[str],
                   rows: list[dict[str, Any]], images: dict[str, bytes],
                   comparison: Any = None) -> Report:
    """The HTML report: the runs, the paired table (what differs between the runs, per
    example), the summary table with a column per run, the figures."""
    report = Report(f"ctxleak compare: {method}", f"{len(results)} run(s) compared")
    report.add_table([{"run": lab, "model": (r.provenance.get("model") or {}).get("name"),
                       "parameters": (r.provenance.get("model") or {}).get("parameters"),
                       "samples": len(r.records), "data": _data(r.config),
                       "seconds": r.wall_time_s, "folder": str(r.path or "")}
                      for lab, r in zip(labels, results)], caption="Runs")
    if comparison is not None:
        report.add_heading("Paired per example")
        paired = paired_rows(comparison)
        if paired:
            report.add_text(PAIRED_TEXT)
            report.add_table(paired)
        else:
            report.add_text(f"Not paired: {comparison.unpaired}.")
    report.add_heading("Summary, a column per run")
    report.add_table(rows)
    if images:
        report.add_heading("Figures, a line per run")
        for name, png in images.items():
            report.add_image(png, caption=name)
    return report


def _g(value: Any) -> str:
    return "—" if value is None else f"{value:.4g}"


def _data(config: dict[str, Any]) -> str:
    data = config.get("data")
    return data if isinstance(data, str) else str(data or "")


def _num(value: Any) -> float:
    return float(value) if value is not None else float("nan")


def _mean(result: Any, block: str, group: str, key: str) -> float:
    stats = ((result.summary.get("means") or {}).get(block, {}).get(group) or {}).get(key)
    return float(stats["mean"]) if stats and stats.get("mean") is not None else float("nan")


__all__ = ["compare_report", "paired_rows"]
