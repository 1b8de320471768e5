"""The summary table of an influence run, one row per setting (the layout of Tables 2-3 of
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models"), and the
report's table of it: a sweep's with the columns that name each setting open and every column
folded below."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.report import Report
from ctxleak.report.frontier import ci_text, setting_columns


def table_rows(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting (Tables 2-3 of the paper): influence in nats per response and per
    token, above the control, how many examples leak beyond it; bounded CID's ε per token
    (``none`` for plain CID) where the sweep has a bound, the added baseline (λ = 1) marked."""
    rows = []
    bounded = any(s.get("bounded_eps") is not None for s in summaries)
    added = any(s.get("added_baseline") for s in summaries)
    for s in summaries:
        infl = s["influence"]
        row = setting_columns(s, summaries)
        if bounded:  # plain and bounded settings side by side: ε per token, or none
            row["ε"] = "none" if s.get("bounded_eps") is None else s["bounded_eps"]
        if added:
            row["baseline"] = "added" if s.get("added_baseline") else ""
        row.update({"ctx tokens": s.get("mean_context_tokens"), "n": s["n"],
                    "influence": infl["mean"],
                    "95% CI": ci_text(infl.get("ci_low"), infl.get("ci_high"))})
        if s.get("influence_per_token"):
            row["per token"] = s["influence_per_token"].get("mean")
        control = s.get("control") or {}
        if control.get("enabled"):
            row["above control"] = (control.get("above_control") or {}).get("mean")
            row["leak beyond control"] = f"{len(control.get('flagged') or [])}/{control['n']}"
        row["ROUGE-L"] = (s["rouge_l"] or {}).get("mean")
        for key, label in (("match", "match"), ("f1", "F1"),
                           ("exact_match", "EM")):  # where references exist
            if any(x.get(key) for x in summaries):
                row[label] = (s.get(key) or {}).get("mean")
        row.update({"Repeat": s["repeat_prompts"], "Rouge": s["rouge_prompts"]})
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
    columns = dict.fromkeys(key for row in rows for key in row)  # plain rows: bounded ones' too
    return [{key: row.get(key) for key in columns} for row in rows]


#: The summary's columns a sweep's report shows open, after the columns that name the setting
#: (:func:`~ctxleak.report.frontier.setting_columns`, ε, baseline); the others are folded.
SUMMARY_OPEN = ("n", "influence", "95% CI", "per token", "above control",
                "leak beyond control")
SETTING_COLUMNS = ("mode", "λ", "T", "ε", "baseline")


def summary_table(report: Report, summaries: Sequence[dict[str, Any]]) -> None:
    """The summary table in the report: a sweep's with the columns that name each setting and
    its influence open (:data:`SUMMARY_OPEN`), every column in a folded table below it (a
    table of twenty columns squeezed into the page's width shows a letter a line); one
    setting's as it is."""
    rows = table_rows(summaries)
    shown = [k for k in (rows[0] if rows else ()) if k in SETTING_COLUMNS or k in SUMMARY_OPEN]
    if len(rows) < 2 or len(shown) == len(rows[0]):
        report.add_table(rows)
        return
    report.add_table([{k: r[k] for k in shown} for r in rows])
    report.add_table(rows, folded="Every column of the summary (utility, regurgitation, "
                     "bounded CID's ε, quality)")


__all__ = ["SETTING_COLUMNS", "SUMMARY_OPEN", "summary_table", "table_rows"]
