"""The black-box attacks as shown (``ctxleak attack extract|membership``): what an attacker
demonstrably gets from a RAG system it can only talk to, one page per attack run, in the family
of the canary audit (``ctxleak canary``, the same ε lower bound).

- membership ("Is My Data in Your Retrieval Database?"; "Mask-based Membership Inference
  Attacks for Retrieval-Augmented Generation"; "Riddle Me This! Stealthy Membership Inference
  for Retrieval-Augmented Generation"; "DCMI: A Differential Calibration Membership Inference
  Attack Against Retrieval-Augmented Generation"): one row per attack with its AUC and interval, the
  TPR at 1 % and 10 % FPR with exact intervals, and the ε lower bound at 95 %; the ROC curves;
- extraction ("The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented
  Generation (RAG)"): documents copied verbatim and near-verbatim, personal data and secrets
  carried out;
- the ledger: one row per document, ranked by what an attacker gets, joined with an influence
  run's per-document ledger where one was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.methods.attacks.attack_ledger import EXTRACTION_FIELDS
from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import print_closing, print_rows
from ctxleak.report.frontier import ci_text
from ctxleak.report.view import View

ROC_PNG = "roc.png"
COVERAGE_PNG = "coverage.png"
#: What each figure shows.
FIGURE_CAPTIONS = {ROC_PNG: "Each attack's ROC: the share of members found (TPR) against the "
                            "share of non-members guessed member (FPR), over every threshold; "
                            "the diagonal is a coin.",
                   COVERAGE_PNG: "The share of the documents some answer copied verbatim or "
                                 "near-verbatim, after each query (fixed anchors, or the "
                                 "adaptive crawl's)."}
#: What the page says of the family the attacks belong to.
FAMILY = ("These attacks need only the target's answers. The canary audit (ctxleak canary) is "
          "the third of the family: it plants canaries in documents it controls and gives the "
          "same ε lower bound (Clopper–Pearson with a union bound, at 95 %). An ε lower bound "
          "is what the attack proves at least; a mitigation's claimed ε must stay above it. A "
          "bound of 0 means the attack did not show a leak, not that there is none: the most "
          "any attack could show with the documents given is beside it.")


def power_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The joint figures of a membership run: the best bound over the attacks at the joint
    confidence, what a perfect attack could show, the smallest detectable AUC − 0.5, the
    threshold rule and what the bound assumes (none for a run written before them)."""
    if "eps_max_showable" not in summary:
        return []
    conf = summary.get("joint_confidence")
    k = summary.get("attacks_compared")
    conf_text = None if conf is None else f"{100 * conf:.0f} %"
    return [
        {"quantity": "ε lower bound, best attack (nats)", "value": summary.get("eps_lower"),
         "meaning": f"at joint confidence {conf_text} over {k} attack(s) (each at 1 − α/{k}); "
                    f"by {summary.get('eps_attack') or 'none'}"},
        {"quantity": "ε a perfect attack could show (nats)",
         "value": summary.get("eps_max_showable"),
         "meaning": "every member scored above every non-member, with these documents, the "
                    "same confidence and threshold rule: no attack could show more"},
        {"quantity": "smallest detectable AUC − 0.5", "value": summary.get("auc_min_detectable"),
         "meaning": "z·√((n₁ + n₀ + 1)/(12·n₁·n₀)): the one-sided rank test at the bound's "
                    "confidence calls a smaller difference chance"},
        {"quantity": "threshold rule", "value": summary.get("threshold_rule"),
         "meaning": "all-trials: every document measures, a Bonferroni share per candidate "
                    "threshold; split-half: chosen on half, measured on the other"},
        {"quantity": "assumes", "value": "independent documents",
         "meaning": summary.get("assumptions")}]


def _ci(interval: Any) -> str:
    """``[low, high]`` of an interval given as a dict (``low``/``high``) or a pair; — if none."""
    if isinstance(interval, Mapping):
        interval = (interval.get("low"), interval.get("high"))
    return ci_text(*interval) if interval else "—"


def _tpr_at(entry: Mapping[str, Any]) -> str:
    """One TPR at a fixed FPR, its interval, and "unresolved" when too few non-members."""
    text = f"{entry['tpr']:.3g} {_ci(entry.get('tpr_ci'))}"
    return text if entry.get("resolved", True) else f"{text} (unresolved: FPR 0 only)"


def membership_rows(attacks: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per attack: AUC (a probability: a random member scores above a random
    non-member) with its interval and the one-sided p-value of AUC > 0.5, the smallest
    AUC − 0.5 these documents can detect, TPR at each fixed FPR with its exact interval, the ε
    lower bound (nats) at the bound's confidence (1 − α/k over k attacks), the most a perfect
    attack could show, the threshold rule, how many documents (half members) would show one
    above 0 at these rates, and the counts."""
    rows = []
    for name, s in attacks.items():
        row: dict[str, Any] = {"attack": name, "members": s.get("n_members"),
                               "non-members": s.get("n_non_members"), "AUC": s.get("auc"),
                               "AUC 95% CI": _ci(s.get("auc_ci")),
                               "p (AUC > 0.5)": (s.get("auc_test") or {}).get("p_value")}
        for entry in s.get("tpr_at_fpr") or []:
            row[f"TPR @ FPR {100 * entry['fpr_target']:g} %"] = _tpr_at(entry)
        row["AUC − 0.5 detectable"] = s.get("auc_min_detectable")
        eps = s.get("eps") or {}
        row["ε ≥ (nats)"] = eps.get("eps_lower")
        if eps.get("confidence") is not None:
            row["ε confidence"] = f"{100 * eps['confidence']:.4g} %"
        row["ε a perfect attack shows (nats)"] = eps.get("eps_max_showable")
        row["threshold rule"] = eps.get("threshold_rule")
        row["documents for ε > 0"] = eps.get("documents_needed")
        rows.append(row)
    return rows


def roc_plot(attacks: Mapping[str, Mapping[str, Any]]) -> bytes:
    """``roc.png``: each attack's ROC (TPR against FPR), with the diagonal of a coin."""
    series: dict[str, tuple[Sequence[float], Sequence[float]]] = {
        f"{name} (AUC {s['auc']:.2f})": ([p["fpr"] for p in s["roc"]],
                                          [p["tpr"] for p in s["roc"]])
        for name, s in attacks.items() if s.get("roc")}
    series["coin (AUC 0.5)"] = ([0.0, 1.0], [0.0, 1.0])
    return plots.line_plot(series, title="Membership ROC, one curve per attack",
                           xlabel="false positive rate (non-members guessed member)",
                           ylabel="true positive rate (members found)")


def table_rows(rows: Sequence[Mapping[str, Any]], limit: int | None = None
               ) -> list[dict[str, Any]]:
    """Rows of plain values (nested lists and dicts as short text), the first ``limit``."""
    return [{k: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
             for k, v in row.items() if not isinstance(v, Mapping)} for row in list(rows)[:limit]]


def attack_report(title: str, meta: Mapping[str, Any], sections: Sequence[
        tuple[str, str, Sequence[Mapping[str, Any]]]], figures: Mapping[str, bytes]) -> Report:
    """The page: the run's facts, then each section (heading, what it shows, its rows), the
    figures, and the family note."""
    report = Report(title, str(meta.get("target", "")))
    report.add_kv({k: v for k, v in meta.items() if v is not None}, caption="Run")
    for heading, text, rows in sections:
        if not rows:
            continue
        report.add_heading(heading)
        if text:
            report.add_text(text)
        report.add_table(table_rows(rows))
    for name, png in figures.items():
        report.add_image(png, caption=FIGURE_CAPTIONS.get(name, name))
    report.add_heading("The attack family")
    report.add_text(FAMILY)
    return report


def print_attack(title: str, rows: Sequence[Mapping[str, Any]], notes: Sequence[str],
                 path: Any, *, plain: bool = False) -> None:
    """The console: the headline table, a few lines, where the run's files are."""
    print_rows(table_rows(rows), title=title, plain=plain)
    out = make_console(plain)
    for line in notes:
        out.print(line)
    print_closing(path, plain)


def extraction_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The extraction's headline: answers and documents copied, values carried out."""
    n, docs = summary.get("queries", 0), summary.get("documents", 0)
    return [
        {"quantity": "documents extracted verbatim", "value": summary.get("documents_verbatim"),
         "meaning": f"of {docs}: some answer copied {summary.get('verbatim_words', 20)} words "
                    "in a row, or the whole document"},
        {"quantity": "documents extracted near-verbatim",
         "value": summary.get("documents_near_verbatim"),
         "meaning": f"of {docs}: some answer's ROUGE-L F1 against it ≥ "
                    f"{summary.get('near_verbatim_rouge', 0.5)}"},
        {"quantity": "answers with a verbatim copy", "value": summary.get("answers_verbatim"),
         "meaning": f"of {n} composite prompts"},
        {"quantity": "answers with a near-verbatim copy",
         "value": summary.get("answers_near_verbatim"), "meaning": f"of {n} composite prompts"},
        {"quantity": "values carried out", "value": summary.get("values_carried"),
         "meaning": "distinct secrets and personal data of a document found in an answer"},
        *coverage_rows(summary)]


def coverage_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The coverage's rows: documents extracted either way, and the queries to 50 % and 80 %
    (none for a run written before them)."""
    if "coverage" not in summary:
        return []
    mode = summary.get("mode")
    return [{"quantity": "documents extracted (verbatim or near-verbatim)",
             "value": summary.get("documents_extracted"),
             "meaning": f"of {summary.get('documents', 0)}, with {mode} anchors"},
            *({"quantity": f"queries to {share} % of the documents",
               "value": summary.get(f"queries_to_{share}") or "not reached",
               "meaning": f"the {mode} run's coverage curve"} for share in (50, 80))]


def coverage_plot(curves: Mapping[str, Sequence[Sequence[float]]]) -> bytes:
    """``coverage.png``: per run (its label), the share of documents extracted against the
    queries (points ``[queries, share]``): give two runs' curves to compare their modes."""
    return plots.line_plot({name: ([p[0] for p in pts], [p[1] for p in pts])
                            for name, pts in curves.items()},
                           title="Documents extracted against queries",
                           xlabel="queries sent", ylabel="share of documents extracted",
                           integer_x=True)


#: The ledger's columns as shown, with their units.
LEDGER_COLUMNS = {"rank": "rank", "document": "document",
                  "harm": "harm (worst thing got out)",
                  "verbatim": "verbatim copies (answers)",
                  "near_verbatim": "near-verbatim copies (answers)",
                  "longest_span": "longest span (words)", "best_rouge_l": "best ROUGE-L F1",
                  "values": "values carried out", "member": "member"}


def ledger_rows(ledger: Sequence[Mapping[str, Any]], limit: int = 50) -> list[dict[str, Any]]:
    """The ledger as shown, most exposed first: rank, document, copies, values carried out,
    each attack's score (0 to 1; the calibrated attack's a difference, −1 to 1) and the
    influence run's columns where joined."""
    rows = []
    for r in list(ledger)[:limit]:
        row: dict[str, Any] = {}
        for key, label in LEDGER_COLUMNS.items():
            if key in r and (key != "member" or r[key] is not None):
                value = r[key]
                row[label] = len(value) if isinstance(value, (list, tuple)) else \
                    "not measured" if value is None and key in EXTRACTION_FIELDS else value
        for attack, score in (r.get("membership") or {}).items():
            scale = "-1 to 1" if attack == "calibrated" else "0-1"
            row[f"{attack} score ({scale})"] = score
        for key, value in (r.get("influence") or {}).items():
            if not isinstance(value, (Mapping, list, tuple)):
                row[f"influence: {key}"] = value
        rows.append(row)
    return rows


class ExtractView(View):
    """``ctxleak attack extract``: the totals, the ledger, the answers that copied most."""

    title = "Context extraction: what an attacker copies out"

    def table(self, result: Any) -> list[dict[str, Any]]:
        return extraction_rows(result.summary)

    def files(self, result: Any) -> dict[str, bytes | str]:
        s = result.summary
        return {COVERAGE_PNG: coverage_plot({f"{s.get('mode')} anchors": s["coverage"]})} \
            if s.get("coverage") else {}

    def figure_names(self, result: Any) -> list[str]:
        return [COVERAGE_PNG]

    def page(self, result: Any) -> Report:
        s = result.summary
        copied = sorted(result.records, key=lambda r: -max(
            [m.get("span", 0) for m in r.get("matches") or []] or [0]))[:10]
        examples = [{"kind": r.get("kind"), "question": r.get("question"),
                     "answer": r.get("answer"),
                     "longest span (words)": max([m.get("span", 0) for m in
                                                  r.get("matches") or []] or [0])}
                    for r in copied]
        return attack_report(self.title, _meta(result), [
            ("What was extracted", "", extraction_rows(s)),
            ("Ledger per document", "Ranked by what an attacker gets: verbatim copies, then "
             "values carried out, then near-verbatim copies.", ledger_rows(s.get("ledger") or [])),
            ("Answers that copied most", "", examples)], self.figures(result))

    def show(self, result: Any, *, plain: bool = False) -> None:
        print_attack(self.title, self.table(result), _notes(result), result.path, plain=plain)


class MembershipView(View):
    """``ctxleak attack membership``: per attack the AUC, TPR at low FPR and ε lower bound,
    the ROC curves, the ledger."""

    title = "Membership inference: which documents an attacker can tell are there"

    def table(self, result: Any) -> list[dict[str, Any]]:
        attacks = {k: v for k, v in (result.summary.get("attacks") or {}).items() if "auc" in v}
        return membership_rows(attacks)

    def files(self, result: Any) -> dict[str, bytes | str]:
        attacks = {k: v for k, v in (result.summary.get("attacks") or {}).items() if "auc" in v}
        return {ROC_PNG: roc_plot(attacks)} if attacks else {}

    def figure_names(self, result: Any) -> list[str]:
        return [ROC_PNG]

    def page(self, result: Any) -> Report:
        s = result.summary
        skipped = [{"attack": k, "why": v["skipped"]} for k, v in (s.get("attacks") or {}).items()
                   if "skipped" in v]
        claim = s.get("eps_claimed")
        laws = [{"attack": k, "ε ≥ (nats)": v["eps"].get("eps_lower"), "ε claimed": claim,
                 "law": v["eps"].get("law")} for k, v in (s.get("attacks") or {}).items()
                if isinstance(v.get("eps"), Mapping)]
        return attack_report(self.title, _meta(result), [
            ("What the attacks could show", "The verdict's figures: the best bound, and the "
             "most any attack could show with these documents.", power_rows(s)),
            ("Attacks", "AUC: the probability that a random member scores above a random "
             "non-member (0.5: a coin), with its bootstrap interval and the p-value of the "
             "one-sided Mann–Whitney test of AUC > 0.5; TPR at a fixed FPR with "
             "exact Clopper–Pearson intervals; ε ≥: the ε lower bound in nats, each attack at "
             "1 − α/k so that the best of the k holds at 95 % (all-trials: every document "
             "measures at each candidate threshold with a Bonferroni share; split-half: the "
             "threshold chosen on half of the documents, the rates measured on the other "
             "half); beside it what a perfect attack would show with the same documents.",
             self.table(result)),
            ("The lower bound beside the claim", "The law: the lower bound never exceeds the ε "
             "the mitigation claims; 'violated' means it is not as private as it claims.",
             laws if claim is not None else []),
            ("Attacks not scored", "", skipped),
            ("Documents an attack could not ask about", "Counted as trials all the same, each "
             "guessed a non-member (score 0): the attack's rule before any answer, so its bound "
             "covers every document of the audit.", abstained_rows(s)),
            ("Ledger per document", "", ledger_rows(s.get("ledger") or []))],
            self.figures(result))

    def show(self, result: Any, *, plain: bool = False) -> None:
        print_attack(self.title, self.table(result), _notes(result), result.path, plain=plain)


def abstained_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per attack that counts its unasked documents as guessed non-members (``abstained``):
    the documents asked about and those guessed without a question."""
    attacks = summary.get("attacks")
    if not isinstance(attacks, Mapping):
        return []
    return [{"attack": k, "documents asked about": v["n_members"] + v["n_non_members"]
             - v["abstained"], "guessed non-member without a question": v["abstained"]}
            for k, v in attacks.items() if isinstance(v, Mapping) and v.get("abstained")]


def _meta(result: Any) -> dict[str, Any]:
    s, c = result.summary, result.config
    joined = s.get("influence_run") or {}
    return {"target": s.get("target") or c.get("target"), "queries sent": s.get("queries_sent"),
            "answers read back from the journal": s.get("queries_replayed"),
            "seed": c.get("seed"), "run directory": str(result.path),
            "influence run joined": f"{joined.get('path')} ({joined.get('setting')})"
            if joined else None, "what influence would add": s.get("influence_note")}


def _notes(result: Any) -> list[str]:
    """The console's lines under the table: the target, the queries, the claim the answers
    said they were released under (``ctxleak serve``'s), and each attack that was not scored
    with why (the table leaves it out, as it has no figures)."""
    s = result.summary
    attacks = s.get("attacks") if isinstance(s.get("attacks"), Mapping) else {}
    skipped = [f"not scored: {k} ({v['skipped']})" for k, v in attacks.items()
               if isinstance(v, Mapping) and "skipped" in v]
    claim = s.get("claim")
    said = []
    if isinstance(claim, Mapping):
        eps = claim.get("eps_max")
        what = "no differential-privacy guarantee" if eps is None else \
            (f"ε ≤ {eps:.3g} nats, δ = {claim.get('delta') or 0:.2g} per response, relation "
             f"{claim.get('relation')}")
        said = [f"the answers' claim ({claim.get('answers')} of {claim.get('of')} said it): "
                f"{what}"]
    guessed = [f"{r['attack']}: asked about {r['documents asked about']} documents; the "
               f"other {r['guessed non-member without a question']} have no words of their own "
               f"and count as guessed non-members" for r in abstained_rows(s)]
    return [f"target: {s.get('target')}",
            f"queries sent: {s.get('queries_sent')}, read back from the journal: "
            f"{s.get('queries_replayed')}", *said, *skipped, *guessed]


__all__ = ["COVERAGE_PNG", "FAMILY", "ROC_PNG", "ExtractView", "MembershipView",
           "abstained_rows", "attack_report", "coverage_plot", "coverage_rows",
           "extraction_rows", "ledger_rows", "membership_rows", "power_rows", "print_attack",
           "roc_plot", "table_rows"]
