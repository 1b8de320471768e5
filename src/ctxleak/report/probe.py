"""Plots, console table and the HTML report of PII probing (ProPILE: Probing Privacy Leakage in
Large Language Models): per-group exact match, target vs null log-likelihoods (Wilcoxon), string
metrics, canary verdicts, soft-prompt training and in-context influence; ``redact`` masks every PII
value."""

from __future__ import annotations

import re
from typing import Any

from ctxleak.methods.pii.summary import GROUP_BY, short_names, unit_values
from ctxleak.methods.pii.verdict import HITS_FILE
from ctxleak.methods.stats import signed_rank_min_n, signed_rank_power_note
from ctxleak.report import Report, plots
from ctxleak.report.console import console as make_console
from ctxleak.report.console import format_cell, print_closing
from ctxleak.report.leakmap import probe_maps
from ctxleak.report.redaction import redactor_for

#: What each timing of a probe run measured (its seconds).
TIMING_LABELS = {"probing_s": "spent probing", "soft_prompt_training_s": "training the soft prompt",
                 "canary_finetune_s": "fine-tuning for the canary"}


def timing_label(key: str) -> str:
    """A timing's key in words: ``probing_s`` → "spent probing"."""
    return TIMING_LABELS.get(key, key.removesuffix("_s").replace("_", " "))


def probe_plots(rows: list[dict], summaries: list[dict], extras: dict[str, Any],
                alpha: float = 0.05) -> dict[str, bytes]:
    """Densities of the per-subject target and null log-likelihoods (App. B.1.1 Fig. 1 style),
    one per summary group, and the soft-prompt training curves."""
    pngs: dict[str, bytes] = {}
    for s in summaries:
        grp = [r for r in rows if all(r.get(k) == s.get(k) for k in GROUP_BY)]
        target = list(unit_values(grp, "target_ll").values())
        null = list(unit_values(grp, "null_ll").values())
        p, _ = p_shown(s["wilcoxon"] or {}, alpha)
        probe, group, pii = short_names(s)
        title = f"{pii}: {probe}, {group}, k={s['shots_k']}" + (
            f" (p = {p:.2g})" if p is not None else "")
        pngs[density_name(s)] = plots.density_plot({"target PII": target, "null PII": null},
                                                 title=title, xlabel="log-likelihood")
    by_template = exact_match_by_template(rows)
    if by_template:
        names = list(by_template)
        pngs["exact_match_by_template.png"] = plots.bar_plot(
            [n if len(n) <= 32 else n[:31] + "…" for n in names],
            [by_template[n] for n in names], title="Exact-match rate by template",
            ylabel="exact-match rate (prompts)")
    training = extras.get("white_box_training") or {}
    if training:
        series = {t: ([h["epoch"] for h in d["history"]], [h["train_nll"] for h in d["history"]])
                  for t, d in training.items()}
        pngs["white_box_training.png"] = plots.line_plot(
            series, title="Soft-prompt training (App. A.4)", xlabel="epoch",
            ylabel="mean target NLL (nats)", integer_x=True)
    return pngs


def density_name(summary: dict[str, Any]) -> str:
    """The file name of a summary group's likelihood density plot."""
    return "density_" + re.sub(r"[^A-Za-z0-9]+", "_", summary["label"]).strip("_").lower() \
        + ".png"


def exact_match_by_template(rows: list[dict]) -> dict[str, float]:
    """The share of generated prompts whose output contains the target, per template (the
    template's text; rows without a generation are left out)."""
    hits: dict[str, list[bool]] = {}
    for r in rows:
        if r.get("exact_match") is not None:
            hits.setdefault(str(r["template"]), []).append(bool(r["exact_match"]))
    return {t: sum(v) / len(v) for t, v in hits.items()}


def subject_values(records: list) -> tuple[list[str], list[str]]:
    """The probed subjects' names (masked word by word under --redact) and every PII value of
    theirs (names, e-mails, phones, addresses, relatives, universities; masked whole, whatever
    the whitespace they are written with)."""
    names = [r.name for r in records if r.name]
    values = [*names]
    for r in records:
        values += [v for v in (r.email, r.phone, r.address, r.university) if v]
        values += [v for v in r.relations.values() if v]
    return names, values


def p_shown(wilcoxon: dict[str, Any], alpha: float) -> tuple[float | None, str | None]:
    """The p-value a table shows, or ``(None, reason)`` where the group's n is too small for
    the one-sided signed-rank test ever to reject at ``alpha`` (or there was no test)."""
    n = wilcoxon.get("n")
    if n is None or wilcoxon.get("pvalue") is None:
        return None, wilcoxon.get("reason") or "no test"
    note = signed_rank_power_note(int(n), alpha)
    if not note["can_reject"]:
        return None, f"n = {n} < {note['min_n']}: can never reach α = {alpha:g}"
    return wilcoxon["pvalue"], None


def table_rows(summaries: list[dict], alpha: float = 0.05) -> list[dict[str, Any]]:
    """One row per group; ``p`` is "—" with the reason beside it where n cannot support the
    test at ``alpha``."""
    out = []
    for s in summaries:
        w = s.get("wilcoxon") or {}
        p, why = p_shown(w, alpha)
        row = {"group": s["label"], "subjects": s["n_units"], "prompts": s["n_prompts"],
               "exact match": s.get("exact_match_rate"),
               "target LL": s.get("mean_target_ll"), "null LL": s.get("mean_null_ll"),
               "target LL/token": s.get("mean_target_ll_norm"),
               "null LL/token": s.get("mean_null_ll_norm"),
               "p (target > null)": p}
        if why:
            row["p note"] = why
        sm = s.get("string_metrics") or {}
        if sm:
            row["string metrics"] = ", ".join(f"{k} {v:.2f}" for k, v in sm.items()
                                              if v is not None)
        ic = s.get("in_context")
        if ic:
            row["influence"] = ic.get("mean_influence")
            row["context share"] = ic.get("mean_context_share")
        out.append(row)
    return out


def probe_report(model: str, records: list, rows: list[dict], summary: dict[str, Any],
            pngs: dict[str, bytes], extras: dict[str, Any], config: dict[str, Any], path: str,
            *, redact: bool, subjects: int | None = None) -> Any:
    """The HTML report of a probe run (ProPILE: Probing Privacy Leakage in Large Language
    Models): the settings, the results per group, the canary check, the white-box training, the
    plots, the in-context leak maps, the timings and the first samples (PII masked under
    ``redact``)."""
    # the run's values (the view's Redactor) and the probed subjects': masked in every text
    names, values = subject_values(records) if redact else ([], [])
    report = Report("ctxleak probe", "PII probing (ProPILE: Probing Privacy Leakage in Large "
                    "Language Models): black-box, white-box and in-context",
                    redact=redactor_for(redact, rows, summary, names=names, extra=values))
    report.add_kv({"model": model, "data": config["data"],
                   "subjects": len(records) if subjects is None else subjects,
                   "modes": ", ".join(config["mode"]) or "—", "PII types": ", ".join(config["pii"]),
                   "k-shot": ", ".join(map(str, config["shots"])), "structure":
                   config["structure"], "beam": config["beam"], "run directory": path})
    _add_summary(report, summary, config.get("alpha", 0.05))
    canary = summary.get("canary")
    if canary:
        _add_canary(report, canary)
    wb = extras.get("white_box_training")
    if wb:
        _add_white_box(report, wb)
    report.add_heading("Plots")
    for name, png in pngs.items():
        report.add_image(png, caption=name)
    ctx = [r for r in rows if "token_influence" in r]
    if ctx and redact:
        report.add_text("In-context: the per-token influence heatmap of a target answer is "
                        "left out under --redact (its tokens are PII).")
    elif ctx:
        probe_maps(report, ctx)
    report.add_heading("Timings")
    report.add_kv({timing_label(k): f"{v:.1f} s" for k, v in summary["timings_s"].items()},
                  caption="Wall-clock time of each stage")
    report.add_heading("Examples")
    examples = [{"mode": r["mode"], "variant": r.get("variant"), "subject": r["subject"],
                 "template": r["template"], "target": r["target"],
                 "generation": r.get("generation"), "exact": r.get("exact_match"),
                 "target LL": r.get("target_ll"), "null LL": r.get("null_ll")} for r in rows[:25]]
    report.add_table(examples, caption="First samples (all are in samples.jsonl, mode 0600)")
    return report


def _add_summary(report: Report, summary: dict[str, Any], alpha: float) -> None:
    """How the results are read (the maximum over templates, exact match, the one-sided
    Wilcoxon signed-rank test of target > null at ``alpha``), then one row per group and the
    (subject, type) pairs skipped."""
    report.add_heading("Summary")
    report.add_text("Per subject (per subject and relationship for relations), the maximum "
                    "over the templates of a structure; exact match counts a subject if any "
                    "template's generation contains the target. Log-likelihoods (LL) are in "
                    "nats (per token: nats per token). p is the one-sided Wilcoxon "
                    "signed-rank test of target > null log-likelihood (null PII: another "
                    "subject's PII under the same prompt); its smallest possible value with n "
                    f"subjects is 2^-n, so at α = {alpha:g} it is shown only where n ≥ "
                    f"{signed_rank_min_n(alpha)}. Every generation that contained the exact "
                    f"target PII is listed in {HITS_FILE} ({summary.get('hits', '—')} here).")
    report.add_table(table_rows(summary["groups"], alpha), caption="Results per group")
    if summary.get("skipped"):
        report.add_kv(summary["skipped"], caption="Skipped (subject, type) pairs")


def _add_canary(report: Report, canary: dict[str, Any]) -> None:
    """The canary check: what the fine-tuned copy was trained on, its training, and the
    verdict on it (and on the original model)."""
    report.add_heading("Canary check")
    ft = canary.get("finetune") or {}
    report.add_text(f"A copy of the model was fine-tuned on the documents of "
                    f"{len(ft.get('inserted', []))} inserted subjects; "
                    f"{len(ft.get('held_out', []))} held-out subjects were not trained on. "
                    "Null PII is drawn from the held-out subjects (never trained on) for "
                    "both groups. Leakage is detected when the inserted subjects' target "
                    "likelihoods rise significantly over null PII and the held-out ones' "
                    "do not. The association p-value compares instead with other inserted "
                    "subjects' PII: whether the model also learnt whose PII it is.")
    report.add_kv({"fine-tuning seconds": ft.get("seconds"), "steps": ft.get("steps"),
                   "trainable parameters": ft.get("n_trainable"),
                   "loss per epoch": ft.get("losses")})
    report.add_table(canary["verdict"], caption="Verdict (fine-tuned copy)")
    if canary.get("baseline_verdict"):
        report.add_table(canary["baseline_verdict"], caption="Same test on the original "
                         "model")


def _add_white_box(report: Report, training: dict[str, Any]) -> None:
    """The soft-prompt training of each PII type (App. A.4): its prompts, best epoch, NLL
    before and after, best exact match on the training subjects and time."""
    report.add_heading("White-box: soft-prompt training")
    report.add_table([{"PII type": t, "train prompts": d["n_train_prompts"],
                       "best epoch": d["best_epoch"], "initial NLL": d["initial_nll"],
                       "final NLL": d["history"][-1]["train_nll"],
                       "best train exact match": max((h.get("exact_match", 0.0)
                                                      for h in d["history"]), default=None),
                       "seconds": d["seconds"]} for t, d in training.items()])


def print_probe(summary: dict[str, Any], path: str, config: dict[str, Any], *,
                plain: bool = False) -> None:
    from rich.table import Table


    console = make_console(plain)
    table = Table(title="PII probing (ProPILE): max over templates per subject")
    cols = ["probe", "group", "k", "PII", "n", "EM", "target", "null", "p"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("probe", "group", "PII") else "right",
                         no_wrap=c in ("probe", "group"))

    def num(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    alpha = config.get("alpha", 0.05)
    notes = []
    for s in summary["groups"]:
        probe, group, pii = short_names(s)
        p, why = p_shown(s.get("wilcoxon") or {}, alpha)
        if why and why not in notes:
            notes.append(why)
        table.add_row(probe, group, str(s["shots_k"]), pii, str(s["n_units"]),
                      num(s.get("exact_match_rate"), ".2f"), num(s.get("mean_target_ll"), ".1f"),
                      num(s.get("mean_null_ll"), ".1f"), num(p, ".2g"))
    console.print(table)
    console.print("n: subjects (subject-relationship pairs for relations); EM: exact-match rate; "
                  "target, null: mean of the per-subject maximum log-likelihood over templates "
                  f"(nats); p: Wilcoxon signed-rank, target > null, tested at α = {alpha:g}")
    for why in notes:
        console.print(f"p —: {why}", markup=False, highlight=False)
    if summary.get("hits") is not None:  # None: nothing generated (likelihoods only)
        console.print(f"exact PII strings generated: {summary['hits']} (listed in {path}/"
                      f"{HITS_FILE})")
    canary = summary.get("canary")
    if canary:
        for v in canary["verdict"]:
            console.print(f"canary {v['pii_type']} ({v['structure']}): inserted p = "
                          f"{format_cell(v['inserted_pvalue'])}, held-out p = "
                          f"{format_cell(v['held_out_pvalue'])} -> "
                          + ("leakage detected" if v["detected"] else "not detected")
                          + f" (association p = {format_cell(v['association_pvalue'])})")
    for key, value in summary["timings_s"].items():
        console.print(f"time {timing_label(key)}: {value:.1f} s")
    print_closing(path, plain)
