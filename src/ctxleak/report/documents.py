"""The documents section of an influence report and its console lines: the leak ledger per
retrieved document across every answer (:mod:`ctxleak.methods.rag.exposure`; "Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2 with the
subset S = one document)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.leakmap import ranked_examples
from ctxleak.report.html import Link, Report
from ctxleak.report.leakmap import MAX_MAPS, anchor

#: Documents listed in the report's table (every one is in results.json and ``documents()``).
SHOWN = 200
EXPLAIN = ("Each document left out of its answer's context and the answer scored again "
           "(leave-one-out influence, Def. 3.1-3.2 with S = the document, nats). A document "
           "leaked in an answer when that influence is above the per-document control (decoy "
           "documents of the corpus put in its place and left out the same way) or when the "
           "answer copied it (a verbatim span of 20 characters or more, or a secret or PII "
           "value). Documents are ranked by leak: 'leaked' counts those answers, 'max above "
           "control' is the largest influence above the control (nats), 'copied' the answers "
           "that copied it, 'flagged' the answers flagged beyond the example control in which "
           "it leaked; 'Σ influence' is the volume, summed over every answer whose context "
           "held it. A budget bounds the leak (nats above the control, summed over the answers "
           "in which it leaked; a copy exceeds a budget of 0); public documents have none. Under "
           "bounded CID the ε columns are DP guarantees for any one document (ε per released "
           "token, composed over all its answers' tokens); the influence columns are measured on "
           "the answers actually given.")


def _map_links(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(example id, setting) -> the anchor of its leak map, for the examples that have one."""
    return {(user_id(records[i]), str(records[i].get("setting", ""))): anchor(i)
            for i in ranked_examples(records)[:MAX_MAPS]}


def ledger_rows(summary: dict[str, Any], records: Sequence[dict[str, Any]] = ()
                ) -> list[dict[str, Any]]:
    """The table rows of one setting's ledger: the top question linked to its leak map where
    the page has one."""
    links = _map_links(records) if records else {}
    over = set(summary.get("over_budget") or ())
    rows = []
    for rank, doc in enumerate((summary.get("documents") or [])[:SHOWN], start=1):
        top = doc.get("top_queries") or []
        first: Any = None
        if top:
            label = f"{top[0]['id']}: {top[0]['query']}" if top[0]["query"] else top[0]["id"]
            where = links.get((str(top[0]["id"]), str(top[0]["setting"])))
            first = Link(label[:80], where) if where else label
        row: dict[str, Any] = {
            "rank": rank, "document": doc["document"], "source": doc.get("source"),
            "class": doc.get("class") or "—",
            "retrieved": doc["retrieved"], "leaked": doc.get("leaked", 0),
            "max above control (nats)": doc.get("leak_max"), "copied": doc.get("copied", 0),
            "flagged": doc["flagged"],
            "Σ influence (nats)": doc["influence_sum"], "max (nats)": doc["influence_max"],
            "per token (nats)": doc.get("influence_per_token"),
            "leaked most through": first,
            "PII repeated in answers": ", ".join(p["text"] for p in doc.get("pii_in_answers")
                                                 or []) or "—"}
        if "eps_basic" in doc:
            row["ε guarantee, basic"] = doc["eps_basic"]
            row[f"ε guarantee at δ = {doc['delta']:g}"] = doc["eps_tight"]
        if summary.get("class_budgets") or summary.get("document_budgets"):
            row["budget (nats)"] = doc.get("budget")
        if summary.get("over_budget") is not None:
            row["over budget"] = "yes" if doc["document"] in over else "no"
        rows.append(row)
    return rows


def documents_section(report: Report, summaries: Sequence[dict[str, Any]],
                      records: Sequence[dict[str, Any]]) -> None:
    """The ledger of each setting, with the budget's verdict where one was set."""
    with_docs = [s for s in summaries if s.get("documents")]
    if not with_docs:
        return
    report.add_heading("Documents: the leak ledger")
    report.add_text(EXPLAIN)
    for s in with_docs:
        where = f" ({s.get('setting')})" if len(summaries) > 1 else ""
        if control_line(s):
            report.add_text(f"{control_line(s)}{where}")
        if s.get("exposure_budget") is not None:
            report.add_text(budget_line(s) + where)
        for line in s.get("budget_breaches") or ():
            report.add_text(f"Over budget{where}: {line}")
        docs = s["documents"]
        report.add_table(ledger_rows(s, records),
                         caption=f"{len(docs)} documents{where}, most leaked first"
                         + (f" (the first {SHOWN} shown)" if len(docs) > SHOWN else ""))
        composition = next((d["composition"] for d in docs if "composition" in d), None)
        if composition:
            report.add_text(f"ε at δ: {composition}; basic: ε per token × the document's "
                            "released tokens, δ = 0.")


def control_line(summary: dict[str, Any]) -> str | None:
    """One sentence on the per-document control of a setting (None without one)."""
    dc = summary.get("document_control")
    if not dc:
        return None
    rate = dc.get("false_flag_rate")
    threshold = dc.get("threshold")
    return ("Per-document control: a document leaked in an answer when "
            f"{dc['rule']}" + (f"; threshold {threshold:.3g} nats over {dc['decoys']} decoy "
                               f"influence(s)" if threshold is not None else "")
            + (f"; a document that adds nothing beyond any other is judged leaked about "
               f"{100 * rate:.3g} % of the time" if rate is not None else "")
            + f". {dc['n_leaks']} leak(s) in {dc['answers']} answer(s).")


def budget_line(summary: dict[str, Any]) -> str:
    """One sentence on the exposure budget of a setting."""
    budget = float(summary["exposure_budget"])
    over = list(summary.get("over_budget") or [])
    if not over:
        return f"No document is over the exposure budget of {budget:g} nats."
    shown = ", ".join(str(d) for d in over[:10]) + (" ..." if len(over) > 10 else "")
    return (f"{len(over)} document(s) over the exposure budget of {budget:g} nats (summed "
            f"leave-one-out influence): {shown}.")


def document_lines(summaries: Sequence[dict[str, Any]], top: int = 3) -> list[str]:
    """Console lines: each setting's most exposed documents and its budget sentence."""
    lines = []
    for s in summaries:
        docs = s.get("documents") or []
        if not docs:
            continue
        where = f" ({s.get('setting')})" if len(summaries) > 1 else ""
        listed = "; ".join(
            f"{d['document']} leaked in {d.get('leaked', 0)} answer(s)"
            + (f" (max {d['leak_max']:+.3g} nats above its control)"
               if d.get("leak_max") is not None else "")
            + f", Σ {d['influence_sum']:.3g} nats over {d['scored']} answer(s)"
            for d in docs[:top])
        lines.append(f"documents by leak{where}: {listed}")
        if control_line(s):
            lines.append(f"{control_line(s)}{where}")
        if s.get("exposure_budget") is not None:
            lines.append(budget_line(s) + where)
        lines += [f"over budget{where}: {line}" for line in s.get("budget_breaches") or ()]
    return lines


__all__ = ["budget_line", "control_line", "document_lines", "documents_section", "ledger_rows"]
