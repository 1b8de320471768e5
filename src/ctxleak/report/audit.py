"""Tables 4-6, Fig. 6 and the HTML report of an audit (Evaluating Privacy Leakage From
In-Context Learning, App. E.2)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.audit.pipeline import SEARCH_COLUMNS, AuditConfig
from ctxleak.report import Report
from ctxleak.report.console import console as make_console
from ctxleak.report.console import print_closing
from ctxleak.report.plots import line_plot


def _num(x: float, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}" if abs(x) >= 1e4 or abs(x) < 1e-3 else f"{x:.{digits}f}".rstrip("0")


def table_rows(rows: Sequence[dict[str, Any]], search: str, *,
               compact: bool = False) -> tuple[list[str], list[list[str]]]:
    """Headers and cells in the layout of Tables 4-6: ε_target, the searched parameter, α,
    ε_empirical, ratio; beyond the paper, the sequences and tokens it rests on and how many
    tokens exceeded the paper's per-token bound. ``compact`` (the console, one table per δ)
    drops the δ, ε_theoretical and sequence columns."""
    headers = ["δ", "ε_target", SEARCH_COLUMNS[search], "α*", "ε_theoretical", "ε_empirical",
               "Ratio", "sequences", "tokens", "tokens > paper bound", "ε at zero loss"]
    digits = 0 if search == "subset_size" else 2
    cells = []
    for r in rows:
        value = r["subset_size"] if search == "subset_size" else r[search]
        cells.append([f"{r['delta']:g}", _num(r["target_eps"]), _num(value, digits),
                      _num(r["alpha"]), _num(r["eps_theoretical"]), _num(r["eps_empirical"], 3),
                      _num(r["ratio"], 3), f"{r['sequences']}/{r['n_gen']}", str(r["tokens"]),
                      str(r["tokens_over_paper_bound"]), _num(r["eps_empirical_zero_loss"], 3)])
    if compact:
        keep = [1, 2, 3, 5, 6, 8, 9, 10]
        short = {2: {"temperature": "τ", "clip": "c", "subset_size": "s"}[search],
                 9: "> bound", 10: "ε(0 loss)"}
        headers = [short.get(i, headers[i]) for i in keep]
        cells = [[c[i] for i in keep] for c in cells]
    return headers, cells


def figure6(rows: Sequence[dict[str, Any]]) -> bytes:
    """Fig. 6: ε_empirical against the target ε, log-log, one line per δ, and y = x."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in rows:
        if r["eps_empirical"] is None or not r["eps_empirical"] > 0:
            continue  # not drawable on a log axis
        xs, ys = series.setdefault(f"δ = {r['delta']:g}", ([], []))
        xs.append(r["target_eps"])
        ys.append(r["eps_empirical"])
    targets = sorted({r["target_eps"] for r in rows})
    series["ε_empirical = ε_target"] = (targets, targets)
    return line_plot(series, title="Target ε vs data-dependent ε_empirical",
                     xlabel="target (theoretical) ε", ylabel="ε_empirical", logx=True, logy=True)


def token_rdp_plot(records: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> bytes:
    """Mean data-dependent per-token RDP at α* by token position, one line per target (first δ)."""
    first = rows[0]["delta"] if rows else None
    series = {}
    for r in rows:
        if r["delta"] != first:
            continue
        per_pos: dict[int, list[float]] = {}
        for rec in records:
            if rec["delta"] == r["delta"] and rec["target_eps"] == r["target_eps"]:
                for t, v in enumerate(rec["token_rdp"]):
                    per_pos.setdefault(t, []).append(v)
        xs = sorted(per_pos)
        ys = [max(sum(per_pos[t]) / len(per_pos[t]), 1e-300) for t in xs]
        series[f"ε_target = {r['target_eps']:g} (α* = {r['alpha']:g})"] = (xs, ys)
    return line_plot(series, title=f"Per-token data-dependent RDP (δ = {first:g})"
                     if first is not None else "Per-token data-dependent RDP",
                     xlabel="token position t", ylabel="mean max_p D↔_α* (log)", logy=True,
                     integer_x=True)


def audit_report(rows: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
                 config: AuditConfig, plots: dict[str, bytes], *, model: str, data: str,
                 seconds: float) -> Any:
    """The self-contained report: parameters, the table, the plots, the synthetic texts."""
    report = Report("DP synthetic-text audit (Evaluating Privacy Leakage From In-Context "
                    "Learning, §5, App. C)",
                    f"model {model} · data {data} · {seconds:.1f} s")
    report.add_text(
        "Algorithm 1 (clip each one-shot prompt's logits to [−c, c], average over s prompts, "
        "sample from softmax(z̄/τ)) at the parameters Algorithm 3 calibrates for each target ε. "
        "ε_empirical sums the data-dependent per-token RDP (max over the remove-one neighbours of "
        "the symmetric Rényi divergence at α*) over all released tokens, converts it with "
        "Theorem C.8 at α* and doubles it (Theorem C.9). 'tokens > paper bound' counts tokens "
        "whose loss exceeds the paper's per-token RDP at Δ = c/(sτ); the bound that holds for "
        "the remove-one neighbour is the one at clip 2c. Losses are shown as measured. "
        "'ε at zero loss' is what the conversion gives with no measured loss at all: where it is "
        "close to ε_empirical, the ratio reflects the conversion more than the data.")
    search = config.search
    report.add_kv({"searched parameter": search, "subset size s": config.subset_size,
                   "clip c": config.clip, "temperature τ (fixed unless searched)":
                   config.temperature, "N_gen": config.n_gen, "T_max": config.max_tokens,
                   "δ": ", ".join(f"{d:g}" for d in config.deltas),
                   "label": config.label}, caption="Parameters")
    headers, cells = table_rows(rows, search)
    report.add_heading("Privacy audit (layout of Tables 4-6)")
    report.add_table(cells, headers=headers)
    for name, png in plots.items():
        report.add_image(png, caption=name)
    report.add_heading("Synthetic texts")
    report.add_table([[f"{r['delta']:g}", _num(r["target_eps"]), _num(r["temperature"], 3),
                       r["sequence"], _num(r["rdp_sum"], 4), r["text"]] for r in records],
                     headers=["δ", "ε_target", "τ", "seq", "Σ_t RDP", "text"])
    return report


def print_audit(rows: Sequence[dict[str, Any]], search: str, path: Any, seconds: float, *,
                plain: bool = False) -> None:
    """The console tables of an audit (one per δ), the legend and where the files are."""
    from rich.table import Table


    console = make_console(plain)
    # grouped by δ as printed: a δ that is not a number (NaN never equals itself) still gets
    # its table, shown as '—'
    for shown in dict.fromkeys(_num(r["delta"], 6) for r in rows):
        part = [r for r in rows if _num(r["delta"], 6) == shown]
        headers, cells = table_rows(part, search, compact=True)
        first = part[0]
        fixed = {"temperature": f"s = {first['subset_size']}, c = {first['clip']:g}",
                 "clip": f"s = {first['subset_size']}, τ = {first['temperature']:g}",
                 "subset_size": f"c = {first['clip']:g}, τ = {first['temperature']:g}"}[search]
        table = Table(title=f"Privacy audit ({fixed}, δ = {shown}, N_gen = {first['n_gen']})")
        for h in headers:
            table.add_column(h, justify="right")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    console.print("ε_empirical: data-dependent RDP summed over all released tokens, Theorem C.8 "
                  "at α*, x2 (App. C.3.3); '> bound': tokens whose loss exceeds the paper's "
                  "per-token RDP at c/(sτ) (reported, not clamped); 'ε(0 loss)': ε_empirical "
                  "if no loss were measured (the conversion term alone).")
    if not all(r["complete"] for r in rows):
        console.print("incomplete: fewer sequences than --sequences (--limit); rerun with --resume "
                      "to finish")
    console.print(f"synthetic texts: {path / 'synthetic.jsonl'}   ({seconds:.1f} s)",
                  markup=False, highlight=False)
    print_closing(path, plain)
