"""One report view per method, in :data:`VIEWS` under the method's name
(:func:`view_for`): everything shown of a Result (the HTML page, the figures and other files of its run
folder, the console table, how ``ctxleak compare`` lines runs up and draws them) is built from
the Result alone (records, summary, config, provenance, its run folder), so a run loaded with
:func:`ctxleak.load_result` renders the same page without the model.

A view never measures: what a page needs is in the run's records (token strings of the influence
leak maps) or its config.

What every view does alike (the verdict at the top of the page, a run made with ``--redact``
shown through one redactor, the Jupyter fragment, the figures in page order) is
:class:`~ctxleak.report.view.View`, the base of the views here.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from ctxleak.methods.audit.pipeline import AuditConfig
from ctxleak.methods.audit.verdict import audit_verdict
from ctxleak.methods.icl.verdict import icl_verdict
from ctxleak.methods.pii.plan import load_probe_records
from ctxleak.methods.pii.verdict import HITS_FILE, hits, probe_verdict
from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions
from ctxleak.methods.susceptibility.verdict import susceptibility_verdict
from ctxleak.report import Report
from ctxleak.report import audit as audit_view
from ctxleak.report import compare as compare_view
from ctxleak.report import frontier as frontier_view
from ctxleak.report import icl as icl_view
from ctxleak.report import influence as influence_view
from ctxleak.report import probe as probe_view
from ctxleak.report import susceptibility as susceptibility_view
from ctxleak.report.attacks import ExtractView, MembershipView
from ctxleak.report.console import console, print_closing, print_rows
from ctxleak.report.findings import FINDINGS
from ctxleak.report.logs import log_notes
from ctxleak.report.redaction import Redactor, redacting
from ctxleak.report.view import View, run_model

#: Rows of the table in the verdict's box.
VERDICT_ROWS = 8


class InfluenceView(View):
    title = "Expected context influence (Def. 3.3)"
    identity = ("λ", "T", "ε")
    skip = frozenset({"ctx tokens", "n", "baseline"})

    def table(self, result: Any) -> list[dict[str, Any]]:
        return influence_view.table_rows(result.summary.get("settings", []))

    def files(self, result: Any) -> dict[str, bytes | str]:
        return {**influence_view.influence_plots(result.summary["settings"]),
                **frontier_view.frontier_plots(result.summary.get("frontier"))}

    def figure_names(self, result: Any) -> list[str]:
        return ["frontier.png", "per_position.png", "context_size.png", "per_window.png",
                "lambda_sweep.png", "temperature_sweep.png"]

    def page(self, result: Any) -> Report:
        records, settings = result.records, result.summary["settings"]
        added = sum(bool(s.get("added_baseline")) for s in settings)
        meta = {"model": run_model(result),
                "examples": len({r["id"] for r in records}),
                # every setting measured, the λ = 1 baseline the sweep did not ask for included
                "settings": f"{len(settings)} ({added} added: λ = 1 without a bound, the "
                            f"baseline)" if added else len(settings),
                "run directory": str(result.path),
                "contexts cut to the window": sum(s["truncated_contexts"] for s in settings),
                "n-grams clipped to the context": sum(s["ngram_clipped"] for s in settings),
                **log_notes(result.summary)}
        tokens_of = None
        if records and all("context_token_strings" in r and "response_token_strings" in r
                           for r in records):
            def tokens_of(i: int) -> tuple[list[str], list[str]]:
                return records[i]["context_token_strings"], records[i]["response_token_strings"]
        first = records[0].get("response_token_strings") if records else None
        return influence_view.influence_report(
            settings, records, self.figures(result), meta, token_strings=first,
            tokens_of=tokens_of, frontier=result.summary.get("frontier"))

    def verdict_table(self, result: Any) -> tuple[list[dict[str, Any]], str]:
        """The documents most leaked (the first setting with a ledger), else the summary's
        rows: above the fold, under the verdict's first sentence."""
        settings = result.summary.get("settings") or []
        ledger = next((s for s in settings if s.get("documents")), None)
        if ledger is None:
            return self.table(result)[:VERDICT_ROWS], "Settings measured"
        over = set(ledger.get("over_budget") or ())
        rows = [{"document": d["document"], "class": d.get("class") or "—",
                 "leaked in (answers)": d.get("leaked", 0), "copied in (answers)":
                 d.get("copied", 0), "max above control (nats)": d.get("leak_max"),
                 **({"over budget": "yes" if d["document"] in over else "no"}
                    if ledger.get("over_budget") is not None else {})}
                for d in ledger["documents"][:VERDICT_ROWS]]
        docs = len(ledger["documents"])
        return rows, (f"The {min(docs, VERDICT_ROWS)} most leaked of {docs} documents "
                      f"(the whole ledger below)")

    def show(self, result: Any, *, plain: bool = False) -> None:
        influence_view.print_influence(result.summary["settings"], result.path, plain=plain,
                                       frontier=result.summary.get("frontier"),
                                       notes=[f"{k}: {v}" for k, v in
                                              log_notes(result.summary).items()])

    def example_html(self, result: Any, record: dict[str, Any]) -> str:
        """One example's leak map and reading, for Jupyter (``result.example(id).show()``)."""
        with redacting(self.redactor(result)):
            return influence_view.example_fragment(record)

    compare_figures = staticmethod(compare_view.influence_figures)


class ExplainView(View):
    title = "Most influential context n-grams"
    identity = ("rank",)
    skip = frozenset({"tokens", "n-gram"})

    def table(self, result: Any) -> list[dict[str, Any]]:
        return list(result.summary.get("top_ngrams", []))

    def page(self, result: Any) -> Report:
        return influence_view.explain_report(result.summary, result.config.get("query", ""),
                                             result.summary["curve"])

    def show(self, result: Any, *, plain: bool = False) -> None:
        # run folders written before the curve was kept: the window size asked for
        n = (result.summary.get("curve") or {}).get("n", result.config.get("ngram"))
        influence_view.print_explain(result.summary, n, result.path, plain=plain)


class ICLView(View):
    title = "ICLInf (Eq. 4)"
    identity = ("shots", "variant")

    def table(self, result: Any) -> list[dict[str, Any]]:
        return icl_view.summary_rows(result.summary.get("iclinf", {}))

    def compute_verdict(self, result: Any) -> dict[str, str] | None:
        return icl_verdict(result.summary, result.records)

    def files(self, result: Any) -> dict[str, bytes | str]:
        return dict(icl_view.icl_plots(result.summary["iclinf"], result.summary["variants"],
                                       result.records))

    def figure_names(self, result: Any) -> list[str]:
        return ["loss_by_position.png", "loss_heatmap.png", "shots_sweep.png",
                "accuracy_shots.png", "calibration.png", "labels_vs_vocab.png"]

    def page(self, result: Any) -> Report:
        config, summary = result.config, result.summary
        icl = config["icl"]
        template = result.provenance.get("prompt_template") or {}
        info = {"model": run_model(result), "data": config.get("data"),
                "format": config["format"], "labels": ", ".join(config["labels"]),
                "label scoring": icl["label_scoring"],
                "output spaces": ", ".join(icl["output_spaces"]),
                "calibration": ", ".join("on" if c else "off" for c in icl["calibration"]),
                "shots": ", ".join(map(str, config["shots"])), "seed": config.get("seed"),
                "texts cut to --max-text-tokens": summary["truncated_texts"],
                "instruction": template.get("instruction"),
                "exemplar template": config["exemplar_template"],
                "query template": config["query_template"]}
        return icl_view.icl_report(summary["iclinf"], result.records, self.figures(result),
                                   summary["headline"], info)

    def show(self, result: Any, *, plain: bool = False) -> None:
        summary = result.summary
        print_rows(self.table(result), title=f"{self.title}, {run_model(result)}, "
                   f"{summary['n_queries']} queries (mean ± std over queries)", plain=plain)
        out = console(plain)
        out.print(f"time per query: {summary['time_per_query_s']:.2f} s")
        print_closing(result.path, plain)

    compare_figures = staticmethod(compare_view.icl_figures)


def _audit_config(config: dict[str, Any]) -> AuditConfig:
    """The audit's parameters as the run stored them in ``config.json``."""
    values = {f.name: config[f.name] for f in fields(AuditConfig) if f.name in config}
    for key in ("target_eps", "deltas", "orders"):
        if isinstance(values.get(key), list):
            values[key] = tuple(values[key])
    return AuditConfig(**values)


class AuditView(View):
    title = "Privacy audit of DP synthetic text"
    identity = ("ε_target",)

    def table(self, result: Any) -> list[dict[str, Any]]:
        headers, cells = audit_view.table_rows(result.summary.get("rows", []),
                                               result.summary.get("search", "temperature"),
                                               compact=True)
        return [dict(zip(headers, row)) for row in cells]

    def compute_verdict(self, result: Any) -> dict[str, str] | None:
        return audit_verdict(result.summary["rows"])

    def files(self, result: Any) -> dict[str, bytes | str]:
        keys = ("delta", "target_eps", "temperature", "clip", "subset_size", "sequence", "text")
        synthetic = "".join(json.dumps({k: r[k] for k in keys}, ensure_ascii=False) + "\n"
                            for r in result.records)
        rows = result.summary["rows"]
        return {"synthetic.jsonl": synthetic, "fig6_epsilon.png": audit_view.figure6(rows),
                "token_rdp.png": audit_view.token_rdp_plot(result.records, rows)}

    def figure_names(self, result: Any) -> list[str]:
        return ["fig6_epsilon.png", "token_rdp.png"]

    def page(self, result: Any) -> Report:
        return audit_view.audit_report(result.summary["rows"], result.records,
                                       _audit_config(result.config), self.figures(result),
                                       model=run_model(result), data=result.config.get("data"),
                                       seconds=result.wall_time_s or 0.0)

    def show(self, result: Any, *, plain: bool = False) -> None:
        audit_view.print_audit(result.summary["rows"], result.summary["search"], result.path,
                               result.wall_time_s or 0.0, plain=plain)

    compare_figures = staticmethod(compare_view.audit_figures)


def _susceptibility_options(config: dict[str, Any]) -> SusceptibilityOptions:
    """The run's options as stored in ``config.json`` (``contexts`` is ``n_contexts``)."""
    stored = {**config, "n_contexts": config.get("contexts")}
    return SusceptibilityOptions(**{f.name: stored[f.name]
                                    for f in fields(SusceptibilityOptions)
                                    if stored.get(f.name) is not None})


class SusceptibilityView(View):
    title = "Susceptibility to context"
    identity = ("group",)

    def table(self, result: Any) -> list[dict[str, Any]]:
        return susceptibility_view.group_rows(result.summary,
                                              result.config.get("reference", "marginal"))

    def compute_verdict(self, result: Any) -> dict[str, str] | None:
        return susceptibility_verdict(result.summary, result.records,
                                      result.config.get("reference", "marginal"))

    def files(self, result: Any) -> dict[str, bytes | str]:
        return dict(susceptibility_view.susceptibility_plots(
            result.records, _susceptibility_options(result.config)))

    def figure_names(self, result: Any) -> list[str]:
        return ["scatter_fisher_vs_mc.png", "scatter_by_relation.png",
                *(f"{kind}_{tag}.png" for tag in ("mc", "fisher")
                  for kind in ("relations", "real_vs_fake"))]

    def page(self, result: Any) -> Report:
        return susceptibility_view.susceptibility_report(
            result.records, result.summary, _susceptibility_options(result.config),
            self.figures(result), model=run_model(result), data=result.config.get("data"))

    def show(self, result: Any, *, plain: bool = False) -> None:
        susceptibility_view.print_susceptibility(
            result.summary, result.config.get("reference", "marginal"), str(result.path),
            plain=plain)

    compare_figures = staticmethod(compare_view.susceptibility_figures)


def _probe_extras(result: Any) -> dict[str, Any]:
    """What the probe run kept beside its samples: the white-box soft-prompt training (with
    its per-epoch history, ``soft_prompt_<type>.json``)."""
    extras: dict[str, Any] = {}
    white_box = result.summary.get("white_box") or {}
    if white_box and result.path is not None:
        training = {}
        for pii_type in white_box:
            meta = Path(result.path) / f"soft_prompt_{pii_type}.json"
            if meta.is_file():
                training[pii_type] = json.loads(meta.read_text(encoding="utf-8"))
        if training:
            extras["white_box_training"] = training
    return extras


def _probe_subjects(result: Any) -> list[Any]:
    """The PII records the run probed, read again from its data (no model needed); none when
    the data were rows in memory or are gone."""
    config = result.config
    canary = config.get("canary")
    try:
        return load_probe_records(config.get("data"), config.get("subjects"),
                                  config.get("seed", 0), config.get("limit"),
                                  2 * canary if canary else 0)
    except Exception:  # noqa: BLE001 - the page then counts the subjects of the samples
        return []


class ProbeView(View):
    title = "PII probing (ProPILE)"
    identity = ("group",)

    def table(self, result: Any) -> list[dict[str, Any]]:
        return probe_view.table_rows(result.summary.get("groups", []),
                                     alpha=result.config.get("alpha", 0.05))

    def compute_verdict(self, result: Any) -> dict[str, str] | None:
        return probe_verdict(result.summary["groups"], result.records,
                             result.config.get("alpha", 0.05))

    def files(self, result: Any) -> dict[str, bytes | str]:
        """The density plots, and ``hits.jsonl``: one line per generation that contained the
        exact target PII (subject, PII type, template, target, the generated span)."""
        out: dict[str, bytes | str] = dict(probe_view.probe_plots(
            result.records, result.summary["groups"], _probe_extras(result),
            result.config.get("alpha", 0.05)))
        out[HITS_FILE] = "".join(json.dumps(h, ensure_ascii=False) + "\n"
                                 for h in hits(result.records))
        return out

    def figure_names(self, result: Any) -> list[str]:
        return [*(probe_view.density_name(s) for s in result.summary.get("groups", [])),
                "exact_match_by_template.png", "white_box_training.png"]

    def redactor(self, result: Any) -> Redactor:
        """The run's Redactor, with the probed subjects' names and PII values added."""
        redactor = super().redactor(result)
        return redactor.adding(*probe_view.subject_values(_probe_subjects(result))) \
            if redactor.on else redactor

    def page(self, result: Any) -> Report:
        model = (result.provenance.get("model") or {}).get("name", "")
        subjects = _probe_subjects(result)
        return probe_view.probe_report(
            model, subjects, result.records, result.summary, self.figures(result),
            _probe_extras(result), result.config, str(result.path),
            redact=bool(result.config.get("redact", False)),
            # rows given in memory cannot be read again: the subjects the samples name
            subjects=None if subjects else len({r.get("subject") for r in result.records}))

    def show(self, result: Any, *, plain: bool = False) -> None:
        probe_view.print_probe(result.summary, str(result.path), result.config, plain=plain)

    compare_figures = staticmethod(compare_view.probe_figures)


class CanaryView(View):
    """``ctxleak canary``: the two bounds side by side, the rates they come from, the law."""

    title = "Canary audit: an attack's ε lower bound beside the guarantee"

    def table(self, result: Any) -> list[dict[str, Any]]:
        s = result.summary
        conf = f"{100 * s.get('confidence', 0.95):.0f} %"
        guarantee = s.get("eps_guarantee")
        bounded = ("the proxy's claim per response between a trial's two contexts (group "
                   f"privacy), δ = {s.get('delta') or 0:.2g} taken off the bound"
                   if "copies" in s else "bounded CID: ε per token summed over the released "
                   "tokens, the largest of the responses")
        return [
            {"quantity": f"ε lower bound ({conf})", "value": s.get("eps_lower"),
             "meaning": "what this attack demonstrates (nats per response)"},
            {"quantity": "ε guarantee", "value": guarantee,
             "meaning": bounded if guarantee is not None else "none: the setting is unbounded"},
            {"quantity": "law", "value": s.get("law"),
             "meaning": "the lower bound never exceeds the guarantee"},
            {"quantity": "TPR", "value": s.get("tpr"),
             "meaning": f"{s.get('tp')} of {s.get('n_in')} measured trials with the canary; "
                        f"exact interval {s.get('tpr_ci')}"},
            {"quantity": "FPR", "value": s.get("fpr"),
             "meaning": f"{s.get('fp')} of {s.get('n_out')} measured trials without it; exact "
                        f"interval {s.get('fpr_ci')}"},
            {"quantity": "threshold", "value": s.get("threshold"),
             "meaning": f"characters of the canary repeated, in any order; {s.get('threshold_choice')}"},
            {"quantity": "trials needed", "value": s.get("trials_needed"),
             "meaning": "for a bound above 0 at these rates"},
            {"quantity": "reading", "value": s.get("reading"), "meaning": ""}]


INFLUENCE = InfluenceView()
EXPLAIN = ExplainView()
ICL = ICLView()
AUDIT = AuditView()
SUSCEPTIBILITY = SusceptibilityView()
PROBE = ProbeView()
#: A Result of no registered method (its summary's scalar fields).
GENERIC = View()

#: A method's command name -> its report view (:func:`view_for`; ``result``: a Result of no
#: known method). A method of your own adds its view here.
VIEWS: dict[str, View] = {"result": GENERIC, "influence": INFLUENCE, "influence-explain": EXPLAIN,
                          "icl": ICL, "audit": AUDIT, "susceptibility": SUSCEPTIBILITY,
                          "probe": PROBE, "canary": CanaryView(),
                          "attack-extract": ExtractView(), "attack-membership": MembershipView(),
                          "findings": FINDINGS}


def view_for(command: str) -> View:
    """The report view of the method named ``command`` (the generic view for any other)."""
    return VIEWS.get(command, GENERIC)
