"""The findings sheet shown (:class:`FindingsView`) and written for other tools: CSV
(:func:`findings_csv`, one line per document) and SARIF 2.1.0 (:func:`findings_sarif`, one result
per document with a finding, for CI gates and code-scanning tools).

The page puts a one-line headline and the table first, so that a reader sees the worst documents
without scrolling (1400 × 1000 pixels); how the harms are ranked and every column follow below.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak._version import __version__
from ctxleak.methods.findings import HARMS
from ctxleak.report import Report
from ctxleak.report.console import print_rows
from ctxleak.report.view import View

#: SARIF rule per harm: (id, name, level, what it means).
RULES: Mapping[str, tuple[str, str, str, str]] = {
    "secret": ("CTXLEAK001", "secret-carried-out", "error",
               "A secret or credential of the document (password, key, token, PIN) was carried "
               "out in an answer."),
    "personal": ("CTXLEAK002", "personal-data-carried-out", "error",
                 "Personal data of the document (a name, e-mail, phone, id, address …) was "
                 "carried out in an answer."),
    "verbatim": ("CTXLEAK003", "verbatim-copy", "warning",
                 "An answer copied the document verbatim (20 words or more, or all of it)."),
    "near-verbatim": ("CTXLEAK004", "near-verbatim-copy", "warning",
                      "An answer copied the document near-verbatim (ROUGE-L F1 ≥ 0.5)."),
    "member": ("CTXLEAK005", "membership-found", "warning",
               "A membership attack told the document is in the datastore at its lowest "
               "false-positive rate."),
    "leaked": ("CTXLEAK006", "influence-leak", "note",
               "The document moved an audit answer beyond the per-document control, or spent "
               "its budget."),
    "public": ("CTXLEAK007", "public-document-used", "note",
               "A public document was copied or carried out: a use, not a leak."),
}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: The sheet's columns as the page shows them above the fold.
SHOWN = ("rank", "document", "class", "harm", "strongest evidence", "by the question",
         "member", "ε spent / budget")
#: The CSV's columns.
CSV_COLUMNS = ("rank", "document", "class", "harm", "evidence", "question", "carried_out",
               "verbatim", "near_verbatim", "longest_span", "best_rouge_l", "member",
               "found_at_fpr", "membership", "leaked", "leak_max", "influence_sum",
               "eps_spent", "eps_budget", "eps_remaining", "over_budget", "runs")


def _budget_text(budget: Mapping[str, Any] | None) -> str | None:
    if not budget or budget.get("spent") is None:
        return "over budget" if budget and budget.get("over_budget") else None
    limit = budget.get("budget")
    text = f"{budget['spent']:.3g} / " + ("no limit" if limit is None else f"{limit:.3g}")
    return text + (" (over)" if budget.get("over_budget") else "")


def _member_text(row: Mapping[str, Any]) -> str | None:
    if row.get("member") is None:
        return None
    found = row.get("found_at_fpr") or {}
    if found:
        return f"yes, found at FPR ≤ {100 * min(found.values()):g} %"
    best = max((row.get("membership") or {}).values(), default=None)
    return ("yes" if row["member"] else "no") + ("" if best is None else f" (score {best:.2f})")


def shown_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The sheet as the page and the console show it (:data:`SHOWN`)."""
    return [dict(zip(SHOWN, (r["rank"], r["document"], r.get("class"), r["harm"],
                             r["evidence"], r.get("question"), _member_text(r),
                             _budget_text(r.get("budget")))))
            for r in rows]


def _cell(value: Any) -> str:
    """A CSV cell; text that a spreadsheet would read as a formula is quoted with ``'``."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_row(row: Mapping[str, Any]) -> list[str]:
    """One document's CSV line (:data:`CSV_COLUMNS`)."""
    budget = row.get("budget") or {}
    values = {
        **row, "carried_out": "; ".join(f"{v['type']} {v['fingerprint']}"
                                        for v in row.get("carried_out") or ()),
        "found_at_fpr": "; ".join(f"{a} {f:g}" for a, f in (row.get("found_at_fpr") or {}).items()),
        "membership": "; ".join(f"{a} {s:.3g}" for a, s in (row.get("membership") or {}).items()),
        "eps_spent": budget.get("spent"), "eps_budget": budget.get("budget"),
        "eps_remaining": budget.get("remaining"), "over_budget": budget.get("over_budget"),
        "runs": "; ".join(row.get("runs") or ())}
    return [_cell(values.get(c)) for c in CSV_COLUMNS]


def findings_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The sheet as CSV, one line per document, most harmful first."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow(csv_row(row))
    return out.getvalue()


def findings_sarif(rows: Sequence[Mapping[str, Any]], headline: str = "") -> dict[str, Any]:
    """The sheet as a SARIF 2.1.0 log: one rule per harm (:data:`RULES`), one result per
    document with a finding (harm ``none`` is left out), its level the rule's, its location the
    document id as a logical location, its rank and class in its properties."""
    order = list(RULES)
    rules = [{"id": rid, "name": name, "shortDescription": {"text": name.replace("-", " ")},
              "fullDescription": {"text": text}, "defaultConfiguration": {"level": level},
              "properties": {"harm": harm}}
             for harm, (rid, name, level, text) in RULES.items()]
    results = []
    for row in rows:
        if row["harm"] not in RULES:
            continue
        rid, _, level, _ = RULES[row["harm"]]
        message = f"{row['document']}: {row['evidence']}"
        if row.get("question"):
            message += f" (question: {row['question']})"
        results.append({
            "ruleId": rid, "ruleIndex": order.index(row["harm"]), "level": level,
            "message": {"text": message},
            "locations": [{"logicalLocations": [{"name": str(row["document"]),
                                                 "fullyQualifiedName": f"document:{row['document']}",
                                                 "kind": "resource"}]}],
            "partialFingerprints": {"ctxleakDocument/v1": f"{row['document']}|{row['harm']}"},
            "properties": {"rank": row["rank"], "class": row.get("class"),
                           "harm": row["harm"]}})
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "ctxleak", "version": __version__, "rules": rules}},
        "results": results,
        "properties": {"headline": headline}}]}


class FindingsView(View):
    """``ctxleak findings``: the headline and the sheet first, then how it is ranked."""

    title = "Findings: one row per document, the worst first"

    def table(self, result: Any) -> list[dict[str, Any]]:
        return shown_rows(result.records)

    def verdict(self, result: Any) -> dict[str, str] | None:
        text = result.summary.get("headline")
        return None if not text else {"text": str(text), "rule": ""}

    def page(self, result: Any) -> Report:
        runs = result.summary.get("runs") or []
        report = Report(self.title, f"{len(result.records)} documents from {len(runs)} run(s)")
        report.add_table(shown_rows(result.records), list(SHOWN),
                         "Ranked: secrets and credentials, then personal data, then verbatim "
                         "copies, near-verbatim copies, members found at low FPR, audit leaks; "
                         "public documents last. Values are named by type and SHA-256 prefix.")
        report.add_heading("How the sheet is ranked")
        report.add_text(
            "Harm, worst first: " + ", ".join(HARMS) + ". Within a harm: more secrets, more "
            "personal values, more verbatim answers, the longest copied run (words), more "
            "near-verbatim answers, the best membership score, the largest leak (nats above the "
            "per-document control). A document of class public ranks last whatever was found: "
            "what it holds is public.")
        report.add_heading("Runs joined")
        report.add_table([{"run": r.get("path"), "command": r.get("command"),
                           "documents": r.get("documents")} for r in runs])
        report.add_table([{c: v for c, v in zip(CSV_COLUMNS, csv_row(r))}
                          for r in result.records], list(CSV_COLUMNS), folded="Every column")
        return report

    def show(self, result: Any, *, plain: bool = False) -> None:
        print_rows(self.table(result)[:20], title=self.title, justify="left", plain=plain)


FINDINGS = FindingsView()

__all__ = ["CSV_COLUMNS", "FINDINGS", "RULES", "SARIF_SCHEMA", "FindingsView", "csv_row",
           "findings_csv", "findings_sarif", "shown_rows"]
