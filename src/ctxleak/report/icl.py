"""Plots, console lines and the HTML report of ICLInf (Evaluating Privacy Leakage From In-Context
Learning §3-4: Eq. 4, Fig. 1, 3, 4, 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.icl.verdict import by_exemplar
from ctxleak.report import Report, plots


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def headline_text(headline: dict[str, Any]) -> dict[str, Any]:
    """The summary's headline numbers as the page shows them (ICLInf mean ± std, accuracy in
    percent)."""
    shown = {k: v for k, v in headline.items() if k not in ("ICLInf mean", "ICLInf std")}
    out = {"shots": shown.pop("shots"), "variant": shown.pop("variant"),
           "ICLInf (nats)": f"{headline['ICLInf mean']:.3f} ± {headline['ICLInf std']:.3f}",
           "accuracy": _pct(shown.pop("accuracy"))}
    return {**out, **shown}


def summary_rows(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for n, by_variant in summary.items():
        for variant, s in by_variant.items():
            rows.append({"shots": int(n), "variant": variant, "queries": s["n"],
                         "ICLInf mean (nats)": round(s["iclinf_mean"], 4),
                         "ICLInf std (nats)": round(s["iclinf_std"], 4),
                         "accuracy": _pct(s["accuracy"]),
                         "mean loss by position (nats)": " ".join(
                             f"{v:.3f}" for v in s["mean_loss_by_position"])})
    return rows


def icl_plots(summary: dict[str, dict[str, Any]], variants: Sequence[str],
              records: Sequence[dict[str, Any]] = ()) -> dict[str, bytes]:
    """Fig. 1 (loss by position), the queries × exemplar positions heatmap, Fig. 3 (ICLInf
    and accuracy against shots), Fig. 4 (calibration on/off) and Fig. 7 (labels against
    vocabulary), each when the run has what it shows."""
    out: dict[str, bytes] = {}
    series = {}
    for n, by_variant in summary.items():
        for variant in variants:
            curve = by_variant[variant]["mean_loss_by_position"]
            name = f"{variant}, {n} shots" if len(variants) > 1 else f"{n} shots"
            series[name] = (list(range(1, len(curve) + 1)), curve)
    out["loss_by_position.png"] = plots.line_plot(
        series, title="Mean privacy loss by position of the removed exemplar (paper Fig. 1)",
        xlabel="exemplar position i", ylabel="mean loss_i (nats)", integer_x=True)
    if records and variants:
        out["loss_heatmap.png"] = loss_heatmap(records, variants[0])
    shots = [int(n) for n in summary]
    if len(shots) > 1:
        sweep = {v: (shots, [summary[str(n)][v]["iclinf_mean"] for n in shots])
                 for v in variants}
        errors = {v: [summary[str(n)][v]["iclinf_std"] for n in shots] for v in variants}
        out["shots_sweep.png"] = plots.line_plot(
            sweep, errors=errors,
            title="ICLInf against the number of exemplars (paper Fig. 3)",
            xlabel="number of shots", ylabel="ICLInf (nats, mean ± std)", integer_x=True)
        accuracy = {v: (shots, [summary[str(n)][v]["accuracy"] for n in shots])
                    for v in variants}
        out["accuracy_shots.png"] = plots.line_plot(
            accuracy, title="Accuracy against the number of exemplars", xlabel="number of shots",
            ylabel="accuracy", integer_x=True)

    def compare(pairs: list[tuple[str, str]], title: str) -> bytes:
        cats, vals, errs = [], [], []
        for n in summary:
            for label, variant in pairs:
                s = summary[n][variant]
                cats.append(f"{label}, {n} shots" if len(summary) > 1 else label)
                vals.append(s["iclinf_mean"])
                errs.append(s["iclinf_std"])
        return plots.bar_plot(cats, vals, errors=errs, title=title, ylabel="ICLInf (nats, mean ± std)")

    spaces = [s for s in ("labels", "vocab") if any(v.startswith(s) for v in variants)]
    if all(f"{s}_calibrated" in variants and s in variants for s in spaces) and spaces:
        pairs = [(f"{s} {state}", f"{s}{suffix}") for s in spaces
                 for state, suffix in (("uncalibrated", ""), ("calibrated", "_calibrated"))]
        out["calibration.png"] = compare(pairs, "ICLInf with and without calibration "
                                                "(paper Fig. 4)")
    if len(spaces) == 2:
        cal = [c for c in ("", "_calibrated") if f"labels{c}" in variants]
        pairs = [(f"{s}{' calibrated' if c else ''}", f"{s}{c}") for c in cal
                 for s in ("labels", "vocab")]
        out["labels_vs_vocab.png"] = compare(pairs, "ICLInf on the label distribution and the "
                                                    "full vocabulary (paper Fig. 7)")
    return out


def loss_heatmap(records: Sequence[dict[str, Any]], variant: str, max_rows: int = 40) -> bytes:
    """The privacy loss of removing exemplar i for each query (rows: the first ``max_rows``
    queries of the largest shot count; columns: exemplar positions 1..n)."""
    with_variant = [r for r in records if variant in r.get("variants", {})]
    n_max = max((len(r["variants"][variant]["loss_by_position"]) for r in with_variant),
                default=0)
    rows = [r for r in with_variant
            if len(r["variants"][variant]["loss_by_position"]) == n_max][:max_rows]
    return plots.heatmap_plot([r["variants"][variant]["loss_by_position"] for r in rows],
                              row_labels=[str(r["id"]) for r in rows],
                              col_labels=[str(i) for i in range(1, n_max + 1)],
                              title=f"Loss by query and exemplar ({variant}, {n_max} shots)",
                              xlabel="removed exemplar position i", ylabel="query")


def icl_report(summary: dict[str, dict[str, Any]], records: Sequence[dict[str, Any]],
               images: dict[str, bytes], headline: dict[str, Any], info: dict[str, Any]) -> Any:
    """The HTML report of an ICLInf run: headline, summary table, Fig. 1/3/4/7, queries."""
    report = Report("ctxleak icl: privacy loss of in-context exemplars (ICLInf)",
                    f"model {info['model']} · data {info['data']} · format {info['format']}")
    report.add_text(
        "ICLInf (Eq. 4): for each query, the largest change over labels y and removed "
        "exemplars i of log A(S, x)(y) − log A(S∖e_i, x)(y), averaged over queries. A is the "
        "next-token distribution restricted to the labels and renormalised (output space "
        "'labels'), or the full next-token distribution ('vocab'); 'calibrated' applies "
        "contextual calibration to every prompt, each with its own content-free distribution.")
    report.add_heading("Summary")
    report.add_kv(headline_text(headline), caption="headline")
    report.add_table(summary_rows(summary), caption="ICLInf mean ± std over queries, accuracy, "
                                                    "mean loss by exemplar position")
    ranked = by_exemplar(records, int(headline["shots"]), str(headline["variant"]))
    if ranked:
        report.add_heading("Exemplars that leak most")
        report.add_text("Each training exemplar's largest loss over the queries it served: the "
                        "ε of ex-post per-instance DP of that exemplar, in nats; the query's "
                        "output is up to e^x times more (or less) likely with it than without.")
        report.add_table([{"training row": e["exemplar"], "largest loss (nats)": e["max_loss"],
                           "likelihood ratio e^x": math.exp(min(e["max_loss"], 700.0)),
                           "on query": e["query"], "at position": e["position"],
                           "mean loss (nats)": e["mean_loss"], "queries": e["queries"]}
                          for e in ranked[:10]],
                         caption=f"the {min(len(ranked), 10)} of {len(ranked)} exemplars with "
                                 f"the largest loss ({headline['shots']} shots, "
                                 f"{headline['variant']})")
    captions = {
        "loss_by_position.png": "Mean loss by position of the removed exemplar (Fig. 1: the U "
                                "shape of the paper).",
        "loss_heatmap.png": "Loss of each query (row) when exemplar i (column) is removed.",
        "accuracy_shots.png": "Accuracy against the number of shots.",
        "shots_sweep.png": "ICLInf against the number of shots (Fig. 3).",
        "calibration.png": "With and without contextual calibration (Fig. 4).",
        "labels_vs_vocab.png": "Label distribution against full vocabulary (Fig. 7).",
    }
    report.add_heading("Plots")
    for name, png in images.items():
        report.add_image(png, captions.get(name, name))
    report.add_heading("Queries")
    first = next(iter(records[0]["variants"])) if records else None
    rows = []
    for r in records[:50]:
        v = r["variants"][first]
        rows.append({"id": r["id"], "shots": r["shots"], "label": r["label"],
                     "prediction": v["prediction"],
                     "ICLInf_j": round(v["iclinf"], 4),
                     "loss by position": " ".join(f"{x:.3f}" for x in v["loss_by_position"]),
                     "exemplar labels": ", ".join(r["exemplar_labels"]),
                     "text": r["text"][:160]})
    report.add_table(rows, caption=f"first {len(rows)} of {len(records)} queries, variant "
                                   f"'{first}' (all in samples.jsonl)")
    report.add_heading("Configuration")
    report.add_kv(info, caption="run")
    return report
