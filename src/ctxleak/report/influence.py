"""Plots, console table and HTML reports of context influence (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Tables 1-3, Fig. 2-4, 8): a dataset run and
``influence explain``."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from typing import Any, Sequence

from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.control import leak_where
from ctxleak.methods.influence.units import reading
from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import print_closing, print_rows
from ctxleak.report.documents import document_lines, documents_section
from ctxleak.report.frontier import frontier_section, print_frontier
from ctxleak.report.influence_table import summary_table, table_rows
from ctxleak.report.leakmap import add_leak_section, add_record_map, explain_map, flag_states
from ctxleak.report.redaction import redactor_for

#: Rows a per-example table of the report shows at most (every value is in samples.jsonl).
SHOWN = 200

EPS_NOTE = (
    "Bounded CID: \"composed ε\" is the guarantee of Theorem B.1 of \"Estimating Privacy "
    "Leakage of Augmented Contextual Knowledge in Language Models\" (App. B, Alg. 1): ε per "
    "released token summed by basic composition (mean over responses, nats). \"ex-post ε\" "
    "sums 2·max_y |log p̄_λ(y|D) − log p(y|∅)| per token (nats): a figure about this context "
    "alone, not a privacy guarantee, as a neighbouring context is only known to stay within "
    "ε/2 of the no-context distribution.")


UNITS_NOTE = (
    "Units: influence is in nats (natural logarithms), summed over the response's tokens, so it "
    "grows with the response's length; \"per token\" divides by it. Read e^x as a likelihood "
    "ratio: the response is e^x times more (or less) likely with the context than without it. "
    "It is the ε of ex-post per-instance differential privacy (Def. 2.2 of \"Estimating "
    "Privacy Leakage of Augmented Contextual Knowledge in Language Models\") at this response, "
    "per-token losses added by basic composition (Def. 3.2); DP budgets are called strong at "
    "ε ≤ 1 and loose at ε ≈ 8. \"above control\" is the influence minus that of another "
    "example's context on the same response (what any context does).")


def influence_plots(summaries: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """PNG plots keyed by file name."""
    out: dict[str, bytes] = {}
    out["per_position.png"] = plots.line_plot(
        {s["setting"]: plots.position_curve(s["per_position_influence"]) for s in summaries},
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
            {s["setting"]: plots.position_curve(s["per_window_influence"]) for s in windows},
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
                     redact: bool | None = None, tokens_of: Any = None,
                     frontier: dict[str, Any] | None = None) -> Report:
    """The HTML report of an influence run: summary table, where the context leaked (ranked
    examples and passages, one leak map per example, when ``tokens_of(i)`` gives record i's
    context and response tokens), plots, examples. ``redact``: mask PII (with the values found
    in any text of the records and summaries, unless a run's Redactor is active); None: as the
    active Redactor (the run's view sets it)."""
    report = Report("ctxleak influence", "Context influence and CID (Estimating Privacy Leakage "
                    "of Augmented Contextual Knowledge in Language Models)",
                    redact=redactor_for(redact, records, summaries, frontier))
    report.add_kv(meta)
    report.add_heading("Summary (layout of the paper's Tables 2-3)")
    summary_table(report, summaries)
    report.add_text(UNITS_NOTE)
    frontier_section(report, frontier)  # a sweep's: which λ or ε to choose
    control_section(report, summaries, records)
    passages_section(report, summaries)
    documents_section(report, summaries, records)
    tokens_section(report, summaries, records)
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
        add_leak_section(report, records, tokens_of, states=flag_states(summaries, records))
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
                       "ROUGE-L": r.get("rouge_l"), "F1": r.get("f1"), "repeat": r["repeat"],
                       "response": report.clean(r["response"])[:300]} for r in records[:200]])
    return report


def _label(summaries: Sequence[dict[str, Any]], s: dict[str, Any]) -> str:
    return f" ({s.get('setting')})" if len(summaries) > 1 else ""


def control_lines(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Per setting the control's rule, paired test and flagged examples (or why none); its cost."""
    lines = []
    for s in summaries:
        c = s.get("control") or {}
        where = _label(summaries, s)
        if not c:
            continue
        if not c.get("enabled"):
            lines.append(f"control{where}: none ({c.get('reason')})")
            continue
        test = c.get("test") or {}
        p = (f"p = {test['pvalue']:.3g}" if test.get("pvalue") is not None
             else f"— ({test.get('reason')})")
        above = c.get("above_control") or {}
        mean = above.get("mean")
        flagged = ", ".join(c.get("flagged_labels") or []) or "none"
        per = c.get("controls_per_example")
        count = (f" ({c['controls']} control influences, {per} per example)"
                 if isinstance(per, int) and per > 1 else "")
        lines.append(f"control{where}: mean control influence "
                     f"{(c.get('influence') or {}).get('mean', 0):.4g} nats{count}; influence "
                     f"above it "
                     f"{mean:.4g} nats per response "
                     f"({(c.get('above_control_per_token') or {}).get('mean') or 0:.3g} per "
                     f"token); one-sided Wilcoxon signed-rank {p}; flagged when {c.get('rule')}: "
                     f"{flagged}")
        if c.get("without_control"):
            lines.append(f"no control{where} for {_few(c['without_control'])}: "
                         f"{c.get('without_control_reason')}")
    cost = next(((s.get("control") or {}).get("cost") for s in summaries
                 if (s.get("control") or {}).get("cost")), None)
    if cost:  # a resumed run counts the responses measured in this process only
        share, total = cost.get("share_of_measure_time"), sum(int(s.get("n") or 0) for s in summaries)
        pct = f", {100 * share:.1f}% of the measuring time" if share is not None else ""
        part = f" of the {total} (those this process measured)" if 0 < cost["examples"] < total else ""
        lines.append(f"control cost: {cost['forward_passes']} extra forward passes for "
                     f"{cost['examples']} responses{part}, {cost['seconds']:.3g} s{pct}")
    return lines


def _few(ids: Sequence[Any], named: int = 10) -> str:
    """Up to ``named`` ids, then how many more."""
    more = f" and {len(ids) - named} more" if len(ids) > named else ""
    return ", ".join(str(i) for i in ids[:named]) + more


def control_section(report: Report, summaries: Sequence[dict[str, Any]],
                    records: Sequence[dict[str, Any]]) -> None:
    """The control: its rule, test and cost, and per example its influence against its
    control's (nats), flagged examples first."""
    lines = control_lines(summaries)
    if not lines:
        return
    report.add_heading("Against a control: what any context does")
    report.add_text("Each response is also scored with another example's context (the "
                    "nearest earlier example's whose context is another document, else the "
                    "nearest later one's) under the same query: "
                    "its influence is what any context does to this query, and the example's "
                    "influence above it is what its own context added.\n" + "\n".join(lines))
    flagged = {(s.get("setting"), i) for s in summaries
               for i in (s.get("control") or {}).get("flagged") or []}
    settings: set[Any] = set()
    seen = [0]

    def against_control() -> Iterator[dict[str, Any]]:
        for r in records:
            if r.get("control_influence") is None:
                continue
            rid = user_id(r)
            settings.add(r.get("setting"))
            seen[0] += 1
            yield {"id": rid, "setting": r.get("setting"),
                   "influence (nats)": r["influence"],
                   "per token": r.get("influence_per_token"),
                   "control": r.get("control_id"),
                   "control influence": r["control_influence"],
                   "above control": r.get("influence_above_control"),
                   "leaks beyond control": (r.get("setting"), rid) in flagged,
                   "most influential": leak_where(r) or "—"}

    # the first 200 in the table's order, kept as the records are read (as sorted()[:200])
    rows = heapq.nsmallest(SHOWN, against_control(),
                           key=lambda row: (not row["leaks beyond control"],
                                            -row["above control"]))
    if len(settings) < 2:
        for row in rows:
            row.pop("setting")
    more = f"; the first {SHOWN} of {seen[0]} (all in samples.jsonl)" if seen[0] > SHOWN else ""
    if rows:
        report.add_table(rows, caption="Examples against their control, those leaking "
                                       f"beyond it first (influence in nats){more}")


def passages_section(report: Report, summaries: Sequence[dict[str, Any]]) -> None:
    """The passages with the most influence (Def. 3.1-3.2 with S = the passage)."""
    rows = [{**({"setting": s.get("setting")} if len(summaries) > 1 else {}), **row}
            for s in summaries for row in s.get("top_passages") or []]
    if not rows:
        return
    report.add_heading("Passages by influence")
    report.add_table(rows, caption="Each passage left out of the context and the response "
                     "scored (Def. 3.1-3.2 with S = the passage): influence in nats, passages "
                     "numbered from 1, most first")


def _shown(strings: Sequence[str], positions: Sequence[int]) -> str:
    """The response tokens at ``positions``, quoted (their position where no string is kept)."""
    return " ".join(repr(strings[t]) if t < len(strings) else str(t) for t in positions)


def tokens_section(report: Report, summaries: Sequence[dict[str, Any]],
                   records: Sequence[dict[str, Any]]) -> None:
    """Response tokens found in the context: known to the model already, or copied."""
    rule = next((s.get("token_rule") for s in summaries if s.get("token_rule")), None)
    if rule is None:
        return
    rows: list[dict[str, Any]] = []
    for r in records:
        if len(rows) == SHOWN:  # the table shows the first SHOWN
            break
        strings = report.shown_tokens(r.get("response_token_strings") or [])
        known = r.get("known_tokens") or []
        copied = r.get("copied_tokens") or []
        if not (known or copied):
            continue
        rows.append({"id": user_id(r), "known (already in the model)": _shown(strings, known),
                     "copied (high influence)": _shown(strings, copied)})
    report.add_heading("Context tokens in the response: known or copied")
    report.add_text("Repeat/Rouge Prompts count a response token that appears in the context "
                    "as leaked; context influence separates the tokens the model predicts as "
                    f"well without the context from those it copied: {rule}.")
    if rows:
        report.add_table(rows)


def example_fragment(record: dict[str, Any], *, redact: bool | None = None) -> str:
    """One example's leak map (its passages' or windows' influence on the context, its tokens'
    on the response), its influence read in nats, per token, as a likelihood ratio and as ε,
    its control and its passages: an HTML fragment for Jupyter (``redact`` as in
    :func:`influence_report`)."""
    rid = user_id(record)
    report = Report(f"ctxleak influence: {rid}", str(record.get("setting") or ""),
                    redact=redactor_for(redact, record))
    tokens = len(record.get("response_ids") or []) or None
    facts: dict[str, Any] = {"response": record.get("response"),
                             "influence": reading(float(record["influence"]), tokens)}
    if record.get("control_influence") is not None:
        facts["control"] = (f"{record['control_influence']:.4g} nats with the context of "
                            f"{record.get('control_id')}; this example's influence is "
                            f"{record['influence_above_control']:.4g} nats above it")
    report.add_kv(facts)
    context = list(record.get("context_token_strings") or [])
    response = list(record.get("response_token_strings") or [])
    add_record_map(report, record, "ex-0", rid, context, response)
    if record.get("passage_influence"):
        ranks = sorted(((v, j) for j, v in enumerate(record["passage_influence"])
                        if v is not None), key=lambda p: -p[0])
        report.add_table([{"rank": k + 1, "passage": j + 1, "text": record["passages"][j],
                           "influence (nats)": v} for k, (v, j) in enumerate(ranks)],
                         caption="Passages by influence (each left out, response scored)")
    return report.fragment()


def print_influence(summaries: Sequence[dict[str, Any]], path: Any, *, plain: bool = False,
                    frontier: dict[str, Any] | None = None, notes: Sequence[str] = ()) -> None:
    """The console table of an influence run (nats), ``notes`` (what the log was), the control
    and the top passages, a sweep's privacy–utility frontier, and where its files are."""
    print_rows(table_rows(summaries), title="Expected context influence, nats per response "
               "(Def. 3.3)", plain=plain)
    console = make_console(plain)
    console.print("influence: nats summed over the response (per token: divided by its length); "
                  "e^x = likelihood ratio with vs without the context; x = the ε of ex-post "
                  "per-instance DP at this response (strong DP: ε ≤ 1, loose: ε ≈ 8)",
                  markup=False)
    for line in [*notes, *control_lines(summaries), *document_lines(summaries)]:
        console.print(line, markup=False)
    for s in summaries:
        top = (s.get("top_passages") or [])[:3]
        if top:
            listed = "; ".join(
                f"{p['id']} {passage_label(p)} {p['influence']:.3g} nats" for p in top)
            console.print(f"top passages{_label(summaries, s)}: {listed}", markup=False)
    print_frontier(frontier, plain=plain)
    print_closing(path, plain)


def passage_label(row: dict[str, Any]) -> str:
    """How the console names a top passage: a retrieved document by its id, else by its number
    in the example's context."""
    document = row.get("document")
    return f"document {document}" if document else f"passage {row['passage']}"


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
    print_closing(path, plain)
