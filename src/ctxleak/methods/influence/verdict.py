"""Influence's verdict: one plain sentence saying which examples leak beyond what any context
does, with the rule behind it (``summary["verdict"] = {"text": ..., "rule": ...}``). A sweep's
verdict is lines instead: the recommendation, one line per setting, a few caveats
(:func:`sweep_verdict`).

An example leaks beyond what any context does when its response influence ("Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.2, nats) exceeds the
control distribution (:func:`ctxleak.methods.influence.control.flag_rule`); where it leaked is
its most influential passage, else its most influential n-gram window. With retrieved
documents, the documents that leaked are named answer by answer: above the per-document control
or copied (:mod:`ctxleak.methods.influence.decoys`); an answer that copies a document is never
read as within a DP budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.influence.control import ALPHA, min_n_for
from ctxleak.methods.influence.summary import copying_reading, mechanism_reading
from ctxleak.methods.influence.units import dp_scale
from ctxleak.methods.tradeoff.frontier import ABOVE_CONTROL, CLAIM_SCOPE, frontier_of
from ctxleak.methods.tradeoff.rows import Frontier, FrontierRow
from ctxleak.methods.tradeoff.setting_summary import Estimate

#: Examples named in the sentence before "and N more".
NAMED = 5


def setting_verdict(summary: dict[str, Any]) -> dict[str, str]:
    """The verdict of one setting's summary (:func:`examples_verdict`), followed, for runs with
    retrieved documents or passages, by the most exposed documents and the exposure budget's
    verdict (:func:`documents_sentence`)."""
    verdict = examples_verdict(summary)
    extra = " ".join(x for x in (leaks_sentence(summary), documents_sentence(summary)) if x)
    if summary.get("document_control") is not None:
        rule = summary["document_control"]["rule"]
        verdict = {**verdict, "rule": f"{verdict['rule']} A document leaked in an answer when "
                   f"{rule}."}
    return {**verdict, "text": f"{verdict['text']} {extra}"} if extra else verdict


def leaks_sentence(summary: dict[str, Any]) -> str:
    """The answers in which a document leaked, each naming the document and how: what it
    copied, or how many nats above the per-document control (decoys, :mod:`.decoys`)."""
    docs = summary.get("document_control") or {}
    leaks = docs.get("leaks") or []
    if not leaks:
        return "" if not docs else "No document leaked in any answer (none copied, none above " \
            "the per-document control)."
    shown = []
    for x in leaks[:NAMED]:
        how = [f"copied {x['copied'][0]!r}"] if x["copied"] else []
        if x["above"] is not None and x["above"] > 0:
            how.append(f"{x['above']:+.3g} nats above the per-document control")
        shown.append(f"{x['id']} leaked {x['document']} ({'; '.join(how)})")
    more = f" and {docs['n_leaks'] - NAMED} more" if docs["n_leaks"] > NAMED else ""
    by_class = docs.get("leaks_by_class") or {}
    classes = f" (leaks by class: {', '.join(f'{n} {c}' for c, n in by_class.items())})" \
        if len(by_class) > 1 else ""
    return (f"Documents leaked in {docs['answers']} answer(s){classes}: {', '.join(shown)}"
            f"{more}.")


def documents_sentence(summary: dict[str, Any], named: int = 3) -> str:
    """The documents ranked by leak (answers in which they leaked, largest nats above the
    per-document control), with their volume (leave-one-out influence summed over every answer
    whose context held them, nats), and the documents over a budget."""
    docs = summary.get("documents") or []
    if not docs:
        return ""
    listed = ", ".join(f"{d['document']} (leaked in {d.get('leaked', 0)} answer(s)"
                       + (f", largest {d['leak_max']:+.3g} nats above its control"
                          if d.get("leak_max") is not None else "")
                       + (f", copied in {d['copied']}" if d.get("copied") else "")
                       + f"; {d['influence_sum']:.3g} nats over {d['scored']} answer(s))"
                       for d in docs[:named])
    text = f"Documents by leak: {listed}."
    if summary.get("exposure_budget") is not None:
        over = list(summary.get("over_budget") or [])
        budget = float(summary["exposure_budget"])
        text += (f" {len(over)} over the exposure budget of {budget:g} nats" +
                 (f": {', '.join(str(d) for d in over[:NAMED])}"
                  f"{' ...' if len(over) > NAMED else ''}." if over else "."))
    if summary.get("class_budgets") or summary.get("document_budgets"):
        breaches = list(summary.get("budget_breaches") or [])
        text += (f" Over budget: {'; '.join(breaches[:NAMED])}"
                 f"{' ...' if len(breaches) > NAMED else ''}." if breaches
                 else " No document is over its budget.")
    return text


def examples_verdict(summary: dict[str, Any]) -> dict[str, str]:
    """Which examples of one setting's summary leak (from :func:`summarize_setting
    <ctxleak.methods.influence.summary.summarize_setting>`).

    It calls no leak below the n where a flag or the paired test means anything (fewer examples
    with a control than the one-sided signed-rank test needs to reach p < α): it says so and
    how many are needed. Its DP sentence reads the influence *above the control* as an ex-post
    ε (what the example's own context added); without a control it is left out, since the raw
    influence of any document on an answer carries no information about a leak."""
    mean = (summary.get("influence") or {}).get("mean")
    per_token = (summary.get("influence_per_token") or {}).get("mean")
    scale = ""
    if mean is not None:
        per = f", {per_token:.3g} per token" if per_token is not None else ""
        scale = f"mean influence {mean:.3g} nats per response{per}"
    control = summary.get("control") or {}
    if not control.get("enabled"):
        reason = control.get("reason") or "no control was run"
        text = (f"No example can be called a leak beyond what any context does: {reason}; "
                f"{scale or 'no influence was measured'}.")
        return {"text": text, "rule": "An example is flagged only against a control (another "
                "example's context scoring the same response); without one none is flagged."}
    above_mean = (control.get("above_control") or {}).get("mean")
    if above_mean is not None:
        reading = mechanism_reading(summary) if summary.get("mechanism") else (
            copying_reading(summary.get("document_control")) or dp_scale(max(above_mean, 0.0)))
        scale += f"; {above_mean:.3g} nats above the control on average ({reading})"
    judged = int(control.get("n") or 0)
    test = control.get("test") or {}
    paired = (f"paired one-sided Wilcoxon p = {test['pvalue']:.2g}"
              if test.get("pvalue") is not None else "paired test —")
    pooled = int(control.get("controls") or judged)
    rule = _control_rule(control, pooled, test)
    need = min_n_for(ALPHA)
    if judged < need:
        top = control.get("largest_above") or {}
        largest = (f"; the largest influence above its control is {top['label']} "
                   f"({top['nats']:+.3g} nats)" if top else "")
        text = (f"Too few examples to tell whether any leaks beyond what any context does: "
                f"{judged} with a control, and at least {need} are needed for the paired test "
                f"to reach p < {ALPHA:g} (a flag against the largest of {pooled} control(s) "
                f"would also fall on a context that adds nothing 1 time in {pooled + 1})"
                f"{largest}; {scale}.")
        return {"text": _with_unjudged(text, control), "rule": rule}
    text = _flagged_text(control, judged, f"{scale}; {paired}")
    return {"text": _with_unjudged(text, control), "rule": rule}


def _control_rule(control: dict[str, Any], pooled: int, test: dict[str, Any]) -> str:
    """The rule behind the verdict: the control's flag, where a leak is placed, the unit, and
    how often a context that adds nothing would be flagged against ``pooled`` controls; why the
    paired ``test`` could not run, where it could not."""
    rule = (f"An example leaks beyond what any context does when its {control['rule']}; "
            "where it leaked is its most influential passage (numbered from 1), else its most "
            "influential n-gram window (context tokens start-end). Influence is Def. 3.2 of "
            "'Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models' "
            "in nats, read as the ε of ex-post per-instance DP (Def. 2.2).")
    rate = control.get("false_flag_rate")
    if rate is not None:
        each_n = control.get("controls_per_example")
        each = f" ({each_n} per example)" if isinstance(each_n, int) and each_n > 1 else ""
        rule += (f" With {pooled} control influence(s){each}, an example whose context adds "
                 f"nothing beyond what any context does is flagged about {100 * rate:.3g} % "
                 f"of the time.")
    if test.get("reason"):
        rule += f" Paired test: {test['reason']}."
    return rule


def _flagged_text(control: dict[str, Any], judged: int, tail: str) -> str:
    """How many of the ``judged`` examples leak, the first :data:`NAMED` of them named with
    where and by how many nats above their control; ``tail``: the scale and the paired test."""
    labels = list(control.get("flagged") or [])
    above = list(control.get("flagged_above_control") or [])
    where = list(control.get("flagged_where") or [None] * len(labels))
    ranks = list(control.get("flagged_own_controls") or [None] * len(labels))
    named = ", ".join(f"{label} ({w + ', ' if w else ''}{a:+.3g} nats above its control"
                      f"{_own_controls(p)})" for label, w, a, p in
                      zip(labels[:NAMED], where[:NAMED], above[:NAMED], ranks[:NAMED]))
    more = f" and {len(labels) - NAMED} more" if len(labels) > NAMED else ""
    if labels:
        return (f"{len(labels)} of {judged} examples leak beyond what any context does: "
                f"{named}{more}; {tail}.")
    return f"0 of {judged} examples leak beyond what any context does; {tail}."


def _own_controls(counts: Any) -> str:
    """``; above 4 of its 4 own controls`` from ``[below, total]`` (its controls' influences
    below the example's, and how many it has); empty with one control or none."""
    if not counts or int(counts[1]) < 2:
        return ""
    return f"; above {int(counts[0])} of its {int(counts[1])} own controls"


def _with_unjudged(text: str, control: dict[str, Any]) -> str:
    """``text`` and the examples that have no control, named."""
    without = list(control.get("without_control") or [])
    if not without:
        return text
    shown = ", ".join(str(i) for i in without[:NAMED]) + (" ..." if len(without) > NAMED else "")
    return (f"{text} {len(without)} more ({shown}) have no control: no other example's context "
            f"is another document, so they are not judged.")


def run_verdict(settings: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The run's verdict: its one setting's, or a sweep's (:func:`sweep_verdict`)."""
    if not settings:
        return {"text": "No example was measured.", "rule": "—"}
    if len(settings) == 1:
        return setting_verdict(settings[0])
    return sweep_verdict(settings)


#: Caveat lines a sweep's verdict keeps at most.
CAVEATS = 3


def sweep_verdict(settings: Sequence[dict[str, Any]]) -> dict[str, str]:
    """A sweep's verdict, one line each (``text`` joined by newlines): the recommendation
    first (:func:`recommendation_line`, from the frontier of the settings,
    :func:`~ctxleak.methods.tradeoff.frontier.frontier`), then one line per setting
    (:func:`setting_line`: its leak above the control in nats per token and its utility, each
    with its interval, its claimed ε), then at most :data:`CAVEATS` caveats
    (:func:`caveat_lines`). The rule is the first setting's."""
    front = frontier_of(settings)
    pick = _recommended(front)
    lines = [recommendation_line(front)]
    lines += [setting_line(row, s, row is pick, front) for row, s in zip(front.rows, settings)]
    lines += caveat_lines(front, settings)[:CAVEATS]
    return {"text": "\n".join(lines), "rule": setting_verdict(settings[0])["rule"]}


def _leak_name(front: Frontier) -> str:
    return "above the control" if front.privacy == ABOVE_CONTROL else "(influence, no control)"


def _interval(value: Estimate) -> str:
    low, high = value.ci_low, value.ci_high
    return "" if low is None or high is None else f" [{low:.2g}, {high:.2g}]"


def _claim(row: FrontierRow) -> str:
    """``ε = 12 per response (shard)``; ``no claim`` where the setting claims nothing."""
    claim = row.guarantee
    if claim.eps is None or claim.relation == "none":
        return "no claim"
    delta = f", δ = {claim.delta:.2g}" if claim.delta else ""
    relation = f" ({claim.relation})" if claim.relation else ""
    return f"ε = {claim.eps:.3g}{delta} per response{relation}"


def _recommended(front: Frontier) -> FrontierRow | None:
    """The frontier's recommended row where it gives up some utility for less leak; None
    where it recommends nothing, or only the best-utility setting (no setting that leaks less
    keeps enough)."""
    row = next((r for r in front.rows if r.setting == front.recommended), None)
    best = max((r.utility.mean for r in front.rows if r.utility.mean is not None), default=None)
    if row is None or row.utility.mean is None or row.utility.mean == best:
        return None
    return row


def recommendation_line(front: Frontier) -> str:
    """One sentence: the recommended setting, its utility and leak with their units and
    what its claim covers; where none is recommended (or only the best-utility setting), the
    frontier's own sentence, which names the setting that comes closest."""
    row = _recommended(front)
    if row is None:
        return str(front.recommendation)
    eps, relation = row.guarantee.eps, row.guarantee.relation
    if relation is None:
        covers = "no DP claim" if eps is None else f"a claim of ε = {eps:.3g} per response"
    elif relation == "none" or eps is None:
        covers = "it claims no guarantee (the measured leak is all that is known)"
    else:
        covers = (f"its claim: ε = {eps:.3g} per response, "
                  f"{CLAIM_SCOPE.get(relation, relation)}")
    kept = f", {100 * row.utility_kept:.0f} % of the best" \
        if row.utility_kept is not None else ""
    return (f"Recommended: {row.label}, {front.utility} {row.utility.mean:.2f}{kept}, "
            f"leak {row.privacy.mean:.2g} nats/token {_leak_name(front)}; {covers}.")


def setting_line(row: FrontierRow, summary: dict[str, Any], chosen: bool,
                 front: Frontier) -> str:
    """One setting in one line: ``- λ = 0.5: leak 0.4 [0.1, 0.7] nats/token above the control;
    F1 0.56 [0.3, 0.8]; ε = 24 per response (context); 2 of 40 flagged``; a DP mechanism's
    own ex-post loss of the examples' documents follows its claim where the run computed it."""
    leak = "leak —" if row.privacy.mean is None else (
        f"leak {row.privacy.mean:.2g}{_interval(row.privacy)} nats/token {_leak_name(front)}")
    utility = front.utility or "utility"
    useful = f"{utility} —" if row.utility.mean is None else (
        f"{utility} {row.utility.mean:.2f}{_interval(row.utility)}")
    control = summary.get("control") or {}
    judged = int(control.get("n") or 0)
    flagged = f"; {len(control.get('flagged') or [])} of {judged} flagged" \
        if control.get("enabled") and judged >= min_n_for(ALPHA) else ""
    spent = summary.get("document_loss")
    own = (f", its own loss {spent['median']:.2g} nats per document (median, largest "
           f"{spent['max']:.2g}), {spent['within_claim']} of {spent['documents']} within it"
           ) if spent else ""
    mark = " (recommended)" if chosen else ""
    return f"- {row.label}{mark}: {leak}; {useful}; {_claim(row)}{own}{flagged}"


def caveat_lines(front: Frontier, settings: Sequence[dict[str, Any]]) -> list[str]:
    """What to keep in mind reading the lines above, most important first: which questions
    utility and leak were read on (fact groups), privacy without a control, too few examples
    to flag one, answers that copy a document, documents over a budget."""
    labels = [r.label for r in front.rows]
    out = []
    if front.fact_note:
        out.append(f"Read on fact groups: {front.fact_note}.")
    if front.privacy_note:
        out.append(f"Note: {front.privacy_note}.")
    need = min_n_for(ALPHA)
    few = [int((s.get("control") or {}).get("n") or 0) for s in settings
           if (s.get("control") or {}).get("enabled")]
    if few and min(few) < need:
        out.append(f"Too few examples to flag any as a leak: {min(few)} with a control, at "
                   f"least {need} needed; the leak figures are means, not flags.")
    copying = [f"{label} ({len((s.get('document_control') or {}).get('copying_answers') or [])})"
               for label, s in zip(labels, settings)
               if (s.get("document_control") or {}).get("copying_answers")]
    if copying:
        out.append(f"Answers copy a document verbatim in {', '.join(copying)}: no ε describes "
                   f"a copy.")
    over = [f"{label} ({len(s.get('over_budget') or [])})" for label, s in zip(labels, settings)
            if s.get("over_budget")]
    if over:
        out.append(f"Documents over a budget: {', '.join(over)}.")
    return out


__all__ = ["CAVEATS", "caveat_lines", "documents_sentence", "examples_verdict",
           "leaks_sentence", "recommendation_line", "run_verdict", "setting_line",
           "setting_verdict", "sweep_verdict"]
