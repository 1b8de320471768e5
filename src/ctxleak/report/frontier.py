"""The privacy–utility frontier of an influence sweep as shown: a console table with one line of
recommendation, an HTML section, and a plot of utility against privacy loss, one point per
setting, the Pareto front marked (:mod:`ctxleak.methods.tradeoff.frontier`; the mitigations
and their utility cost of "Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.tradeoff.rows import Frontier
from ctxleak.methods.tradeoff.setting_summary import Estimate
from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import print_rows
from ctxleak.run.atomic import os_errors, refuse_replacing, write_atomic

FRONTIER_PNG = "frontier.png"


def ci_text(low: Any, high: Any) -> str:
    """An interval as the tables show it, ``[low, high]``; — without one."""
    return "—" if low is None or high is None else f"[{low:.3g}, {high:.3g}]"


#: The Pareto column: on the front, not on it, or compared with no other.
PARETO = {True: "yes", False: "no", None: "—"}

#: Each utility beside the one the frontier reads, by its key: its column's name.
OTHER_UTILITIES = (("match", "match"), ("exact_match", "EM"), ("f1", "F1"),
                   ("rouge_l", "ROUGE-L"))


def frontier_rows(front: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One display row per setting: privacy loss (nats per token) with its 95% interval, the ε
    guarantee per response (and, where canary audits were given, the ε an attack demonstrated),
    utility, its paired difference to λ = 1 with the interval, the
    share of the best utility kept, and whether it is on the Pareto front."""
    got = Frontier.read(front)
    privacy = "above control/token" if got.privacy.endswith(
        "above control per token") else "influence/token"
    utility = got.utility or "utility"
    audited = any(r.eps_lower is not None for r in got.rows)
    claims = any(r.guarantee.relation is not None for r in got.rows)
    paid = any(r.mechanism for r in got.rows)
    others = [(k, name) for k, name in OTHER_UTILITIES
              if k != got.utility_key and any(r.score(k).value.mean is not None
                                               for r in got.rows)]
    rows = []
    for r in got.rows:
        kept, diff = r.utility_kept, r.difference
        attack = {"attack ε ≥ (95%)": r.eps_lower} if audited else {}
        claim = {"covers": r.guarantee.relation} if claims else {}
        tokens = {"paid tokens": r.guarantee.tokens_paid} if paid else {}
        more: dict[str, Any] = {}
        for k, name in others:
            score = r.score(k)
            more[name] = score.value.mean
            more[f"Δ {name} (95% CI)"] = None if score.difference.mean is None else (
                f"{score.difference.mean:.3g} "
                f"{ci_text(score.difference.ci_low, score.difference.ci_high)}")
        rows.append({
            "setting": r.label, privacy: r.privacy.mean,
            "95% CI": ci_text(r.privacy.ci_low, r.privacy.ci_high),
            "ε/response": r.guarantee.eps, **claim, **tokens, **attack,
            utility: r.utility.mean,
            f"Δ {utility} vs λ = 1": ("baseline (added)" if r.added_baseline
                                      else "baseline") if r.baseline else diff.mean,
            "Δ 95% CI": ci_text(diff.ci_low, diff.ci_high), **more,
            "kept": None if kept is None else f"{100 * kept:.0f} %",
            "Pareto": PARETO[r.pareto]})
    return rows


def compact_rows(front: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The frontier as the report shows it open, one row per setting in six columns: the
    setting, its leak (nats per token, with its 95% interval), its utility (with its
    interval), its claimed ε per response (and what it covers), whether it is on the Pareto
    front and whether it is recommended; every column is in :func:`frontier_rows`."""
    got = Frontier.read(front)
    leak = ("leak above control, nats/token" if got.privacy.endswith(
        "above control per token") else "leak (influence), nats/token")
    utility = got.utility or "utility"
    rows = []
    for r in got.rows:
        eps, relation = r.guarantee.eps, r.guarantee.relation
        claim = "—" if eps is None or relation == "none" else (
            f"{eps:.3g}" + (f" ({relation})" if relation else ""))
        rows.append({
            "setting": r.label, leak: _value_ci(r.privacy), utility: _value_ci(r.utility),
            "claim ε/response": claim, "Pareto": PARETO[r.pareto],
            "recommended": "yes" if r.setting == got.recommended else ""})
    return rows


def _value_ci(value: Estimate) -> str:
    if value.mean is None:
        return "—"
    return f"{value.mean:.3g}" + ("" if value.ci_low is None or value.ci_high is None
                                  else f" {ci_text(value.ci_low, value.ci_high)}")


def setting_columns(setting: dict[str, Any], settings: Sequence[dict[str, Any]]
                    ) -> dict[str, Any]:
    """The columns that name a setting in the report's table: λ and T, led by ``mode`` (the
    mechanism's key, or CID) where the run measured other mechanisms than CID, whose λ is
    then "—" (their answers are scored at λ = 1, but not decoded by CID)."""
    if not any(s.get("mechanism") for s in settings):
        return {"λ": setting["lambda"], "T": setting["temperature"]}
    mechanism = setting.get("mechanism")
    return {"mode": mechanism or "CID", "λ": "—" if mechanism else setting["lambda"],
            "T": setting["temperature"]}


def short_label(label: str) -> str:
    """A setting's label as a plot shows it: a mechanism's key without its δ,
    ``dp-vote(eps=2,shards=4,delta=0.0001)`` as ``dp-vote eps=2,shards=4``; others as they are."""
    name, sep, params = label.partition("(")
    if not sep or not params.endswith(")") or " " in name:
        return label
    kept = [p for p in params[:-1].split(",") if not p.startswith("delta=")]
    return f"{name} {','.join(kept)}".strip()


def frontier_plots(front: Mapping[str, Any] | None) -> dict[str, bytes]:
    """``frontier.png``: utility against privacy loss, one point per setting, Pareto points
    filled; 95% interval bars on both axes where a setting has them, and the title says so only
    then. Empty without a frontier or without utility; the settings it skipped (a figure not
    finite) are left out."""
    got = Frontier.read(front) if front else None
    if got is None or not got.utility:
        return {}
    left_out = {s["setting"] for s in got.skipped}
    points = [{"x": r.privacy.mean, "y": r.utility.mean, "label": short_label(r.label),
               "marked": bool(r.pareto), "x_low": r.privacy.ci_low,
               "x_high": r.privacy.ci_high, "y_low": r.utility.ci_low,
               "y_high": r.utility.ci_high} for r in got.rows if r.setting not in left_out]
    bars = any(p["x_low"] is not None or p["y_low"] is not None for p in points
               if p["x"] is not None and p["y"] is not None)
    title = "Utility against privacy loss, one point per setting"
    title += "\nbars: 95% bootstrap CI; filled: Pareto front" if bars else "\nfilled: Pareto front"
    return {FRONTIER_PNG: plots.frontier_plot(
        points, title=title, xlabel=f"{got.privacy} (nats)", ylabel=str(got.utility))}


def save_frontier_plot(front: Mapping[str, Any], path: str | Path, *,
                       overwrite: bool = False) -> Path:
    """Write :func:`frontier_plots`' ``frontier.png`` of ``front`` (a frontier summary, e.g.
    ``result.frontier_summary(joined=[...])``) to ``path``, whole or not at all. An existing
    file is refused unless ``overwrite``; a frontier without utility (no references) has no
    plot, a :class:`~ctxleak.errors.ConfigError`; a path that cannot be written (its folder
    missing, read-only) is an :class:`~ctxleak.errors.OutputError` naming it."""
    path = Path(path)
    refuse_replacing(path, overwrite=overwrite, name="plot")
    png = frontier_plots(front).get(FRONTIER_PNG)
    if png is None:
        raise ConfigError(f"plot {path}: the frontier has no utility against the references "
                          f"(its questions have none), and its plot draws utility against leak",
                          param="plot")
    with os_errors(path, "write the plot to"):  # e.g. a folder that does not exist: one line
        write_atomic(path, png, replace=overwrite)  # without overwrite: never replaces a file
    return path


def notes(front: Mapping[str, Any]) -> list[str]:
    """The recommendation, the questions utility and leak were read on where the sweep split
    them by fact group, the fallback note where privacy is not above a control, the settings
    measured by two joined runs, then the settings skipped because a figure is not finite,
    each with its reason."""
    got = Frontier.read(front)
    out = [f"Recommendation: {got.recommendation}"]
    for line in front.get("joined") or ():
        out.append(f"Joined runs: {line}.")
    if got.fact_note:
        out.append(f"Fact groups: {got.fact_note}.")
    if got.privacy_note:
        out.append(f"Note: {got.privacy_note}")
    if got.skipped:
        out.append("Skipped (a figure that is not a finite number; never on the Pareto front, "
                   "never recommended, not plotted): " + "; ".join(
                       f"{s['label']} ({s['reason']})" for s in got.skipped) + ".")
    return out


def print_frontier(front: Mapping[str, Any] | None, *, plain: bool = False) -> None:
    """The frontier table and its recommendation on the console (nothing for a single
    setting's run)."""
    if not front:
        return
    print_rows(frontier_rows(front), title="Privacy–utility frontier (privacy loss in nats per "
               "token; utility against the references)", plain=plain)
    out = make_console(plain)
    for line in notes(front):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def frontier_section(report: Report, front: Mapping[str, Any] | None) -> None:
    """The frontier in the HTML report: the table, the recommendation and how to read it."""
    if not front:
        return
    got = Frontier.read(front)
    report.add_heading("Choosing a mitigation: the privacy–utility frontier")
    report.add_table(compact_rows(front))
    report.add_table(frontier_rows(front), folded="Every column of the frontier (paired "
                     "differences to λ = 1, other utilities, tokens paid, share kept)")
    report.add_text("\n".join(notes(front)) + (
        f"\nPrivacy loss is the {got.privacy} (nats per token); utility is "
        f"{got.utility or 'not measured (no references)'} against the references, its "
        "difference paired by example with the λ = 1 setting without a bound (BCa bootstrap, "
        "95%). A setting is on the Pareto front when no other has privacy loss no higher and "
        "utility no lower, one of them strictly. The recommendation is the Pareto setting with "
        f"the least privacy loss that keeps {100 * float(got.keep or 0):.0f} % of the "
        "best utility. 'covers' names the neighbouring relation of each claimed ε: a "
        "shard-level ε is not a document-level ε, and 'none' claims nothing; 'paid tokens' "
        "are the released tokens per answer that spent privacy budget."))


__all__ = ["FRONTIER_PNG", "compact_rows", "frontier_plots", "frontier_rows", "frontier_section",
           "short_label", "print_frontier", "setting_columns"]
