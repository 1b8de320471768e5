"""Influence's verdict: one plain sentence saying which examples leak beyond what any context
does, with the rule behind it (``summary["verdict"] = {"text": ..., "rule": ...}``).

An example leaks beyond what any context does when its response influence ("Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.2, nats) exceeds the
control distribution (:func:`ctxleak.methods.influence.control.flag_rule`); where it leaked is
its most influential passage, else its most influential n-gram window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.influence.units import dp_scale

#: Examples named in the sentence before "and N more".
NAMED = 5


def setting_verdict(summary: dict[str, Any]) -> dict[str, str]:
    """The verdict of one setting's summary (from :func:`summarize_setting
    <ctxleak.methods.influence.summary.summarize_setting>`)."""
    n = summary.get("n") or 0
    mean = (summary.get("influence") or {}).get("mean")
    per_token = (summary.get("influence_per_token") or {}).get("mean")
    scale = ""
    if mean is not None:
        per = f", {per_token:.3g} per token" if per_token is not None else ""
        scale = f"mean influence {mean:.3g} nats per response{per} ({dp_scale(mean)})"
    control = summary.get("control") or {}
    if not control.get("enabled"):
        reason = control.get("reason") or "no control was run"
        text = (f"No example can be called a leak beyond what any context does: {reason}; "
                f"{scale or 'no influence was measured'}.")
        return {"text": text, "rule": "An example is flagged only against a control (another "
                "example's context scoring the same response); without one none is flagged."}
    labels = list(control.get("flagged") or [])
    above = list(control.get("flagged_above_control") or [])
    where = list(control.get("flagged_where") or [None] * len(labels))
    named = ", ".join(f"{label} ({w + ', ' if w else ''}+{a:.3g} nats above its control)"
                      for label, w, a in zip(labels[:NAMED], where[:NAMED], above[:NAMED]))
    more = f" and {len(labels) - NAMED} more" if len(labels) > NAMED else ""
    test = control.get("test") or {}
    if test.get("pvalue") is not None:
        paired = f"paired one-sided Wilcoxon p = {test['pvalue']:.2g}"
    else:
        paired = "paired test —"
    without = list(control.get("without_control") or [])
    judged = n - len(without)
    if labels:
        text = (f"{len(labels)} of {judged} examples leak beyond what any context does: "
                f"{named}{more}; {scale}; {paired}.")
    else:
        text = (f"0 of {judged} examples leak beyond what any context does; {scale}; "
                f"{paired}.")
    if without:
        text += (f" {len(without)} more ({', '.join(str(i) for i in without[:NAMED])}"
                 f"{' ...' if len(without) > NAMED else ''}) have no control: no other "
                 f"example's context is another document, so they are not judged.")
    rule = (f"An example leaks beyond what any context does when its {control['rule']}; "
            "where it leaked is its most influential passage (numbered from 1), else its most "
            "influential n-gram window (context tokens start-end). Influence is Def. 3.2 of "
            "'Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models' "
            "in nats, read as the ε of ex-post per-instance DP (Def. 2.2).")
    if test.get("reason"):
        rule += f" Paired test: {test['reason']}."
    return {"text": text, "rule": rule}


def run_verdict(settings: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The run's verdict: its one setting's, or each setting's prefixed by the setting."""
    if not settings:
        return {"text": "No example was measured.", "rule": "—"}
    if len(settings) == 1:
        return setting_verdict(settings[0])
    parts = [(s.get("setting"), setting_verdict(s)) for s in settings]
    text = " ".join(f"[{name}] {v['text']}" for name, v in parts)
    return {"text": text, "rule": parts[0][1]["rule"]}


__all__ = ["run_verdict", "setting_verdict"]
