"""Plots, console table and HTML reports of context influence (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Tables 1-3, Fig. 2-4, 8): a dataset run and
``influence explain``."""

from __future__ import annotations

import json
from typing import Any, Sequence

from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import print_rows
from ctxleak.report.leakmap import add_leak_section, explain_map

EPS_NOTE = (
    "Bounded CID: \"composed ε\" is the guarantee of Theorem B.1 of \"Estimating Privacy "
    "Leakage of Augmented Contextual Knowledge in Language Models\" (App. B, Alg. 1): ε per "
    "released token summed by basic composition (mean over responses, nats). \"ex-post ε\" "
    "sums 2·max_y |log p̄_λ(y|D) − log p(y|∅)| per token (nats): a figure about this context "
    "alone, not a privacy guarantee, as a neighbouring context is only known to stay within "
    "ε/2 of the no-context distribution.")


def table_rows(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting, in the layout of the paper's Tables 2-3."""
    rows = []
    for s in summaries:
        infl = s["influence"]
        row = {"λ": s["lambda"], "T": s["temperature"],
               "ctx tokens": s.get("mean_context_tokens"), "n": s["n"],
               "influence": infl["mean"], "95% CI": _ci(infl),
               "ROUGE-L": (s["rouge_l"] or {}).get("mean"),
               "Repeat": s["repeat_prompts"], "Rouge": s["rouge_prompts"]}
        if "max_window_influence" in s:
            row["max n-gram"] = s["max_window_influence"]["mean"]
        if "composed_eps" in s:
            row["composed ε"] = s["composed_eps"]["mean"]
            if s.get("composed_eps_ex_post"):
                row["ex-post ε"] = s["composed_eps_ex_post"]["mean"]
            row["mean λ"] = s.get("mean_lambda")
        for key, label in (("bertscore_f1", "BERTScore F1"), ("factkb", "FactKB")):
            if any((x.get("quality") or {}).get(key, {}).get("value") is not None
                   for x in summaries):
                row[label] = ((s.get("quality") or {}).get(key) or {}).get("value")
        rows.append(row)
    return rows


def _ci(stats: dict[str, Any]) -> str:
    if stats.get("ci_low") is None:
        return "—"
    return f"[{stats['ci_low']:.3g}, {stats['ci_high']:.3g}]"


def _curve(values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, v in enumerate(values):
        if v is not None:
            xs.append(float(i + 1))
            ys.append(float(v))
    return xs, ys


def influence_plots(summaries: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """PNG plots keyed by file name."""
    out: dict[str, bytes] = {}
    out["per_position.png"] = plots.line_plot(
        {s["setting"]: _curve(s["per_position_influence"]) for s in summaries},
        title="Influence of the t-th generated token (Fig. 2c)", xlabel="token position t",
        ylabel="mean token influence", integer_x=True)
    sizes = sorted({s["mean_context_tokens"] for s in summaries if s.get("mean_context_tokens")})
    if len(sizes) > 1:
        by_lt: dict[str, tuple[list[float], list[float]]] = {}
        for s in summaries:
            name = f"λ={s['lambda']:g}, T={s['temperature']:g}"
            xs, ys = by_lt.setdefault(name, ([], []))
            xs.append(float(s["mean_context_tokens"]))
            ys.append(float(s["influence"]["mean"]))
        out["context_size.png"] = plots.line_plot(by_lt, title="Influence vs context size "
                                                  "(Fig. 2b)", xlabel="context tokens",
                                                  ylabel="expected influence")
    windows = [s for s in summaries if s.get("per_window_influence")]
    if windows:
        out["per_window.png"] = plots.line_plot(
            {s["setting"]: _curve(s["per_window_influence"]) for s in windows},
            title="Influence of the i-th context n-gram (Fig. 3)", xlabel="window index i",
            ylabel="mean response influence", integer_x=True)
    out.update(sweep_plots(summaries))
    return out


def sweep_plots(summaries: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """Influence against λ (one line per T; Fig. 8, Table 2) and against T (one line per λ;
    Table 3), with the bootstrap 95% intervals as error bars, where the run swept them."""
    out: dict[str, bytes] = {}
    for x_key, line_key, name, label in (("lambda", "temperature", "lambda_sweep.png", "λ"),
                                         ("temperature", "lambda", "temperature_sweep.png", "T")):
        if len({s[x_key] for s in summaries}) < 2:
            continue
        series: dict[str, tuple[list[float], list[float]]] = {}
        bounds: dict[str, tuple[list[float], list[float]]] = {}
        for s in sorted(summaries, key=lambda s: s[x_key]):
            other = "T" if line_key == "temperature" else "λ"
            line = f"{other}={s[line_key]:g}"
            if s.get("mean_context_tokens") and len({x.get("mean_context_tokens")
                                                      for x in summaries}) > 1:
                line += f", {s['mean_context_tokens']:.0f} ctx tokens"
            xs, ys = series.setdefault(line, ([], []))
            lo, hi = bounds.setdefault(line, ([], []))
            infl = s["influence"]
            xs.append(float(s[x_key]))
            ys.append(float(infl["mean"]))
            lo.append(float(infl["ci_low"]) if infl.get("ci_low") is not None else float("nan"))
            hi.append(float(infl["ci_high"]) if infl.get("ci_high") is not None else float("nan"))
        fig = "Fig. 8, Table 2" if x_key == "lambda" else "Table 3"
        out[name] = plots.line_plot(series, intervals=bounds,
                                    title=f"Influence against {label} ({fig}), 95% bootstrap CI",
                                    xlabel=label, ylabel="expected influence")
    return out


def influence_report(summaries: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
                     images: dict[str, bytes], meta: dict[str, Any], token_strings=None,
                     redact: bool = False, tokens_of: Any = None) -> Report:
    """The HTML report of an influence run: summary table, where the context leaked (ranked
    examples and passages, one leak map per example, when ``tokens_of(i)`` gives record i's
    context and response tokens), plots, examples."""
    report = Report("ctxleak influence", "Context influence and CID (Estimating Privacy Leakage "
                    "of Augmented Contextual Knowledge in Language Models)", redact=redact)
    report.add_kv(meta)
    report.add_heading("Summary (layout of the paper's Tables 2-3)")
    report.add_table(table_rows(summaries))
    if any("composed_eps" in s for s in summaries):
        report.add_text(EPS_NOTE)
    missing: dict[str, str] = {}  # the first reason of each metric, whichever setting gave it
    for s in summaries:
        for key, label in (("bertscore_f1", "BERTScore F1"), ("factkb", "FactKB")):
            reason = ((s.get("quality") or {}).get(key) or {}).get("reason")
            if reason and label not in missing:
                where = f" (λ = {s['lambda']}, T = {s['temperature']})" if len(summaries) > 1 else ""
                missing[label] = reason + where
    if missing:
        report.add_kv(missing, caption="Quality metrics not computed")
    if records and tokens_of is not None:
        add_leak_section(report, records, tokens_of)
    report.add_heading("Figures")
    for name, png in images.items():
        report.add_image(png, caption=name)
    if records and token_strings is not None and tokens_of is None:
        first = records[0]
        report.add_heading(f"Token influence of example {first['id']}")
        report.add_token_heatmap(token_strings, first["token_influence"],
                                 caption="|log p̄(y_t|D) − log p(y_t|∅)| per response token")
    report.add_heading("Examples")
    report.add_table([{"id": r["id"], "setting": r["setting"], "influence": r["influence"],
                       "ROUGE-L": r.get("rouge_l"), "repeat": r["repeat"],
                       "response": r["response"][:300]} for r in records[:200]])
    return report


def print_influence(summaries: Sequence[dict[str, Any]], path: Any, *, plain: bool = False) -> None:
    """The console table of an influence run and where its files are."""
    print_rows(table_rows(summaries), title="Expected context influence (Def. 3.3)",
               plain=plain)
    make_console(plain).print(f"results: {path / 'results.json'}   report: {path / 'report.html'}")


def explain_report(summary: dict[str, Any], query: str, curve: dict[str, Any]) -> Report:
    """The report of ``influence explain``: the Table 1 heatmap, top n-grams, window curve."""
    n = curve["n"]
    report = Report("ctxleak influence explain", "Uni-gram influence on the next token "
                    "(Table 1)")

    report.add_kv({"query": query, "response": summary["response"],
                   "first response token": summary["first_token"],
                   "response influence": summary["influence"]})
    report.add_heading("Where the context leaked")
    explain_map(report, summary["context_tokens"], curve["starts"], curve["per_window"], n,
                summary.get("response_tokens") or [], summary["token_influence"])
    report.add_heading("Influence of each context token on the first response token "
                       "(Table 1)")
    report.add_token_heatmap(summary["context_tokens"],
                             summary["unigram_influence_on_first_token"],
                             caption="influence of deleting each context token on the first "
                             "response token")
    report.add_table(summary["top_ngrams"], caption=f"top {n}-grams by influence on the whole "
                                                    "response")
    report.add_image(plots.line_plot({"window": (curve["starts"], curve["per_window"])},
                                     title=f"Influence of each {n}-gram (stride 1)",
                                     xlabel="window start (token)", ylabel="response influence",
                                     integer_x=True))
    return report


def print_explain(summary: dict[str, Any], n: int, path: Any, *, plain: bool = False) -> None:
    """What ``influence explain`` prints: the response, its influence, the top n-grams."""
    from rich.table import Table


    console = make_console(plain)
    console.print(f"[bold]response[/bold]: {summary['response']}")
    console.print(f"response influence: {summary['influence']:.4g}")
    table = Table(title=f"Most influential context {n}-grams")
    for col in ("rank", "tokens", "n-gram", "influence"):
        table.add_column(col)
    for row in summary["top_ngrams"]:
        table.add_row(str(row["rank"]), row["tokens"], json.dumps(row["n-gram"]),
                      f"{row['influence']:.4g}")
    console.print(table)
    console.print(f"report: {path / 'report.html'}")
