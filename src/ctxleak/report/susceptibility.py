"""Plots, console tables and the HTML report of susceptibility (Efficiently Computing Susceptibility
to Context in Language Models: χ_MC, χ_F, their correlation, open vs closed, real vs made-up
entities, time per query)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.susceptibility.pipeline import (
    TYPE_LABELS,
    SusceptibilityOptions,
    group_means,
)
from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import format_cell, print_closing


def susceptibility_plots(records: Sequence[dict[str, Any]], options: SusceptibilityOptions
               ) -> dict[str, bytes]:
    """PNG plots: χ_F against χ_MC by query type, per-relation means and real against made-up
    entities (one plot per method: their scales differ)."""
    mc, fk = options.mc_key, "chi_f"
    mc_label = "χ_MC (nats)" if options.reference == "marginal" else "χ_MC, no-context ref. (nats)"
    labels = {mc: mc_label, fk: f"χ_F (σ²={options.sigma2:g}, {options.fisher_vocab})"}
    out: dict[str, bytes] = {}
    if options.run_mc and options.run_fisher:
        rows = [r for r in records if r.get(mc) is not None and r.get(fk) is not None]
        xs, ys = [r[mc] for r in rows], [r[fk] for r in rows]
        title = plots.correlation_title("χ_F against χ_MC, per query", xs, ys)
        out["scatter_fisher_vs_mc.png"] = plots.scatter_plot(
            xs, ys, labels=[TYPE_LABELS.get(r["query_type"], r["query_type"]) for r in rows],
            title=title, xlabel=labels[mc], ylabel=labels[fk])
        out["scatter_by_relation.png"] = plots.scatter_plot(
            xs, ys, labels=[str(r["relation"]) for r in rows],
            title=plots.correlation_title("χ_F against χ_MC, by relation", xs, ys),
            xlabel=labels[mc], ylabel=labels[fk])
    for key, tag, on in ((mc, "mc", options.run_mc), (fk, "fisher", options.run_fisher)):
        if not on:
            continue
        by_rel = group_means(records, [key], lambda r: r["relation"])
        names = list(by_rel)
        out[f"relations_{tag}.png"] = plots.bar_plot(
            names, [by_rel[n][key]["mean"] if by_rel[n][key] else math.nan for n in names],
            errors=[by_rel[n][key]["sem"] if by_rel[n][key] else 0.0 for n in names],
            title=f"Mean {labels[key]} per relation", ylabel=labels[key])
        kinds = group_means(records, [key], lambda r: r["entity_kind"])
        cats = [k for k in ("real", "fake") if k in kinds]
        out[f"real_vs_fake_{tag}.png"] = plots.bar_plot(
            ["real entities" if c == "real" else "made-up entities" for c in cats],
            [kinds[c][key]["mean"] if kinds[c][key] else math.nan for c in cats],
            errors=[kinds[c][key]["sem"] if kinds[c][key] else 0.0 for c in cats],
            title=f"Mean {labels[key]}: real and made-up entities", ylabel=labels[key])
    return out


def _fmt_corr(c: dict[str, Any] | None) -> dict[str, Any]:
    c = c or {}
    pr, sr = c.get("pearson"), c.get("spearman")
    return {"n": c.get("n"), "Pearson r": pr["r"] if pr else None,
            "Pearson p": pr["p"] if pr else None, "Spearman ρ": sr["r"] if sr else None,
            "Spearman p": sr["p"] if sr else None, "note": c.get("reason", "")}


def susceptibility_report(records: Sequence[dict[str, Any]], summary: dict[str, Any],
                 options: SusceptibilityOptions, pngs: dict[str, bytes], *, model: str,
                 data: str):
    """The HTML report (every text escaped by :class:`ctxleak.report.Report`): what is measured
    and with which settings, the most susceptible queries, the correlation of the two methods,
    the means by group, the figures, the most persuasive contexts and the time per query."""
    rep = Report("Susceptibility to context",
                 f"model {model}, data {data}, {len(records)} queries, method {options.method}")
    _add_definitions(rep, options)
    _add_settings(rep, options, summary, len(records))
    top = top_rows(summary)
    if top:
        rep.add_heading("Most susceptible queries")
        rep.add_table(top, caption="ranked by " + ("χ_MC" if options.run_mc else "χ_F"))
    warning = (summary.get("agreement") or {}).get("warning")
    if warning:
        rep.add_text("Warning: " + warning)
    if "correlation" in summary:
        _add_correlation(rep, summary["correlation"])
    _add_means(rep, summary["means"], (options.mc_key, "chi_f"))
    for name, png in pngs.items():
        rep.add_image(png, caption=name)
    if options.run_mc:
        _add_persuasive(rep, records, options.mc_key)
    timing = summary.get("timing", {})
    if timing:
        rep.add_heading("Time per query")
        rep.add_kv(timing, caption="seconds per query for each method; speedup = MC / Fisher")
    return rep


def _add_definitions(rep: Report, options: SusceptibilityOptions) -> None:
    """What χ_MC (Du et al. 2024, with this run's reference) and χ_F (Eq. 10-11) are."""
    rep.add_text(
        "Monte Carlo susceptibility χ_MC(q) = Σ_c p̂(c)·KL(p(·|c,q) ‖ p̄(·|q)) over sampled "
        "contexts (Du et al. 2024); the reference p̄ is "
        + ("the marginal Σ_c p̂(c)·p(·|c,q), so χ_MC is the mutual information of context and "
           "answer." if options.reference == "marginal" else
           "the no-context distribution p(·|q) (--reference no-context): not the mutual "
           "information.")
        + f" Fisher susceptibility χ_F(q) = ½σ²·Σ_a p(a|e)·‖∇_e log p(a|e)‖² over the "
        f"{'top-' + str(options.top_k) if options.fisher_vocab == 'topk' else 'full-vocabulary'}"
        " next tokens, e = the query's input embeddings (Eq. 10-11).")


def _add_settings(rep: Report, options: SusceptibilityOptions, summary: dict[str, Any],
                  queries: int) -> None:
    """The run's settings (``queries``: how many were measured), the contexts cut to the
    model's window and the units of χ."""
    rep.add_kv({"queries": queries, "contexts drawn per query": options.n_contexts,
                "context pool": options.context_entities
                + (f" ({options.entity_draws} mention the queried entity)"
                   if options.context_entities == "mix" else ""),
                "sampling": options.sampling,
                "reference": options.reference, "top-k": options.top_k,
                "σ²": options.sigma2, "Fisher vocabulary": options.fisher_vocab,
                "Fisher top-k truncation": options.fisher_truncation},
               caption="Settings")
    cut = summary.get("truncation") or {}
    if cut.get("contexts"):
        rep.add_kv(cut, caption="contexts cut to fit the model's window: queries affected, "
                                "contexts, tokens removed (per query in samples.jsonl)")
    rep.add_text("Units: χ_MC is a mutual information in nats, never above its ceiling "
                 "min(H(A|q), H(C)), the entropy of the answer distribution over the sampled "
                 "contexts (and of the contexts drawn); χ_F is on another scale (½σ² times a "
                 "Fisher-information trace): it ranks queries and is never read as nats.")


def _add_correlation(rep: Report, corr: dict[str, Any]) -> None:
    """The correlation of χ_F and χ_MC: overall, by query type, open and closed, and of the
    per-relation means."""
    rep.add_heading("Correlation of χ_F and χ_MC")
    rows = [{"group": "overall", **_fmt_corr(corr["overall"])}]
    rows += [{"group": TYPE_LABELS.get(t, t), **_fmt_corr(c)}
             for t, c in corr["by_query_type"].items()]
    rows += [{"group": "open (both forms)", **_fmt_corr(corr["open"])},
             {"group": "closed", **_fmt_corr(corr["closed"])},
             {"group": "per-relation means", **_fmt_corr(corr["by_relation_means"])}]
    rep.add_table(rows)


def _add_means(rep: Report, means: dict[str, Any], keys: tuple[str, str]) -> None:
    """One table per grouping: each group's size and the mean and standard error of each
    method's χ (``keys``: the Monte Carlo key and ``chi_f``)."""
    rep.add_heading("Means")
    for name, caption in (("by_query_type", "by query type"), ("open_vs_closed",
                          "open against closed"), ("real_vs_fake", "real against made-up"),
                          ("by_relation", "by relation")):
        groups = means[name]
        rows = []
        for g, m in groups.items():
            row: dict[str, Any] = {"group": g, "n": m["n"]}
            for k in keys:
                if k in m and m[k]:
                    row[f"mean {k}"] = m[k]["mean"]
                    row[f"sem {k}"] = m[k]["sem"]
            rows.append(row)
        rep.add_table(rows, caption=caption)


def _add_persuasive(rep: Report, records: Sequence[dict[str, Any]], mc: str) -> None:
    """The 10 queries of highest χ_MC (``mc``: its key) with their most persuasive context."""
    fk = "chi_f"
    rep.add_heading("Most persuasive contexts")
    top = sorted(records, key=lambda r: -(r.get(mc) or 0.0))[:10]
    rows = []
    for r in top:
        best = (r.get("persuasive_contexts") or [{}])[0]
        rows.append({"query": r["query"], "type": r["query_type"], "entity": r["entity_kind"],
                     mc: r.get(mc), fk: r.get(fk), "top context": best.get("context"),
                     "ψ": best.get("psi")})
    rep.add_table(rows, caption="the 10 most susceptible queries and their most persuasive "
                                "context (ψ = KL from the reference)")


def group_rows(summary: dict[str, Any], reference: str = "marginal") -> list[dict[str, Any]]:
    """The mean of each method over all queries and by group (the console table's rows)."""
    mc = "chi_mc" if reference == "marginal" else "chi_mc_nocontext"
    keys = [k for k in (mc, "chi_f") if k in summary["metrics"]]
    groups = [("all", {k: summary["metrics"][k] for k in keys})]
    for block in ("by_query_type", "real_vs_fake"):
        groups += list(summary["means"][block].items())
    return [{"group": name, **{column(k): (stats.get(k) or {}).get("mean") for k in keys}}
            for name, stats in groups]


#: The unit of each susceptibility in a column header.
UNIT_OF = {"chi_mc": "nats, MI", "chi_mc_nocontext": "nats", "chi_f": "rank scale, not nats"}


def column(key: str) -> str:
    """A table header with its unit: ``mean chi_mc (nats, MI)``."""
    return f"mean {key} ({UNIT_OF.get(key, '')})" if key in UNIT_OF else f"mean {key}"


def top_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The most susceptible queries (``summary["top_queries"]``) with their ceilings."""
    out = []
    for q in summary.get("top_queries") or []:
        row: dict[str, Any] = {"query id": q.get("id"), "query": q.get("query")}
        for key in ("chi_mc", "chi_mc_nocontext", "chi_f"):
            if key in q:
                row[f"{key} ({UNIT_OF[key]})"] = q[key]
        if "ceiling" in q:
            row["ceiling (nats)"] = q["ceiling"]
            share = q.get("share_of_ceiling")
            row["share of ceiling"] = None if share is None else f"{100 * share:.3g}%"
        out.append(row)
    return out


def print_susceptibility(summary: dict[str, Any], reference: str, path: str, *,
                         plain: bool = False) -> None:
    """The console tables of a susceptibility run (means, correlations, time per query)."""
    from rich.table import Table


    console = make_console(plain)
    mc, fk = "chi_mc" if reference == "marginal" else "chi_mc_nocontext", "chi_f"
    table = Table(title=f"Susceptibility ({summary['n_queries']} queries)")
    table.add_column("group")
    keys = [k for k in (mc, fk) if k in summary["metrics"]]
    for k in keys:
        table.add_column(column(k), justify="right")
    groups = [("all", {k: summary["metrics"][k] for k in keys})]
    for block in ("by_query_type", "real_vs_fake"):
        groups += list(summary["means"][block].items())
    for name, stats in groups:
        table.add_row(name, *[format_cell((stats.get(k) or {}).get("mean")) for k in keys])
    console.print(table)
    top = top_rows(summary)
    if top:
        tt = Table(title="Most susceptible queries")
        for col in top[0]:
            tt.add_column(col, justify="left" if col in ("query id", "query") else "right")
        for row in top:
            tt.add_row(*[format_cell(v) for v in row.values()])
        console.print(tt)
    corr = summary.get("correlation")
    if corr:
        ct = Table(title="Correlation of χ_F with χ_MC")
        for col in ("group", "n", "Pearson r", "Spearman ρ"):
            ct.add_column(col, justify="right" if col != "group" else "left")
        rows = [("overall", corr["overall"])] + list(corr["by_query_type"].items())
        for name, c in rows:
            ct.add_row(name, str(c["n"]), format_cell((c.get("pearson") or {}).get("r")),
                       format_cell((c.get("spearman") or {}).get("r")))
        console.print(ct)
    warning = (summary.get("agreement") or {}).get("warning")
    if warning:
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    t = summary.get("timing", {})
    parts = []
    if "seconds_per_query_mc" in t:
        parts.append(f"Monte Carlo {format_cell(t['seconds_per_query_mc'])} s/query "
                     f"({format_cell(t.get('mean_distinct_contexts'))} distinct of {t['draws_per_query']} "
                     "drawn contexts)")
    if "seconds_per_query_fisher" in t:
        parts.append(f"Fisher {format_cell(t['seconds_per_query_fisher'])} s/query")
    if t.get("speedup_fisher_over_mc"):
        parts.append(f"speedup {t['speedup_fisher_over_mc']:.1f}x")
    console.print("time: " + ", ".join(parts))
    print_closing(path, plain)
