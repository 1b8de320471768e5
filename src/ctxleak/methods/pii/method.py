"""The probe Method (ProPILE: Probing Privacy Leakage in Large Language Models, App. A.3, A.4, B.1):
one record per probe prompt (subject, PII type, template) under each mode and variant; summarised
per group with exact match, target vs null likelihoods and the Wilcoxon test, and the canary
verdicts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.needs import probe as probe_needs
from ctxleak.methods.pii.canary import canary_verdict
from ctxleak.methods.pii.leakmap import in_context_map
from ctxleak.methods.pii.params import MAX_SHOTS, ProbeParams
from ctxleak.methods.pii.plan import load_probe_records, plan_probes, token_budgets
from ctxleak.methods.pii.probe import ProbeOptions
from ctxleak.methods.pii.runners import finetune_canary, probe_runners, train_soft_prompts
from ctxleak.methods.pii.summary import GROUP_BY, group_label, summarize_probes
from ctxleak.methods.pii.templates import template_texts
from ctxleak.methods.pii.verdict import UNITS as VERDICT_UNITS
from ctxleak.methods.pii.verdict import generated, hits, probe_verdict, significance
from ctxleak.run.distributed import barrier
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import say

__all__ = ["MAX_SHOTS", "ProbeMethod", "ProbeParams"]


class ProbeMethod(Method):
    """PII probing (``ctxleak probe``). ``common``: the run options; ``params``: the method's
    own (:class:`ProbeParams`)."""

    name = "probe"
    desc = "probe"
    private = True

    def __init__(self, common: RunOptions | None = None,
                 params: ProbeParams | None = None) -> None:
        super().__init__(common)
        self.params = params if params is not None else ProbeParams()
        self.settings = self.params.settings()
        self.timings: dict[str, float] = {}
        self.extras: dict[str, Any] = {}

    # ---- items -------------------------------------------------------------------------------
    def items(self, data: Any) -> list[Any]:
        s, seed = self.settings, self.common.seed
        need = 2 * s["canary"] if s["canary"] else 0
        self.records = load_probe_records(data, s["subjects"], seed, self.common.limit, need)
        self.plan = plan_probes(self.records, s["mode"], s["pii"], s["shots"], s["structure"],
                                s["train_fraction"], seed, s["canary"], s["canary_baseline"])
        return self.plan.tasks

    def example_id(self, item: Any) -> str | int:
        """The subject's own id (how it is probed is in ``mode``, ``variant``, ``group``,
        ``shots_k``, ``pii_type`` and ``template``; the row's ``key`` names the prompt)."""
        return str(item.item.subject_id)

    def inputs(self, data: Any) -> dict[str, Any]:
        return {"data": None if is_named(data, "demo") else data}

    def config(self, data: Any) -> dict[str, Any]:
        s = dict(self.settings)
        subjects = s.pop("subjects") if is_named(data, "demo") else None
        s.pop("subjects", None)
        return {"data": describe(data), "subjects": subjects, **s}

    # ---- measuring ---------------------------------------------------------------------------
    def setup(self, lm: LanguageModel, run: Any) -> None:
        s, plan, seed = self.settings, self.plan, self.common.seed
        chat = self.common.chat_template == "on"
        budgets = token_budgets(lm, plan, s["max_new_tokens"], chat,
                                generate=bool(s["generate"]))
        options = ProbeOptions(beam=s["beam"], generate=s["generate"], chat=chat,
                               context_template=s["context_template"], max_new_tokens=budgets)
        self.extras = {"max_new_tokens": budgets}
        soft: dict[str, Any] = {}
        if plan.train_items:
            t0 = time.time()
            # data-parallel: rank 0 trains and saves the soft prompts, the others then reload them
            if not run.world.is_main:
                barrier()
            soft, self.extras["white_box_training"] = train_soft_prompts(lm, run, plan, s,
                                                                         options, seed)
            if run.world.is_main:
                barrier()
            self.timings["soft_prompt_training_s"] = time.time() - t0
        tuned = None
        if s["canary"] is not None:
            done = run.done_keys()
            saved = run.path / "canary_finetune.json"
            pending = any(t.variant.startswith("fine-tuned") for i, t in enumerate(plan.tasks)
                          if run.world.owns(i) and t.key not in done)
            if saved.is_file() and not pending:  # resuming a finished run: no need to train
                self.extras["canary_finetune"] = json.loads(saved.read_text(encoding="utf-8"))
            else:
                tuned, self.extras["canary_finetune"] = finetune_canary(lm, plan, s, seed)
                run.write_file(saved.name, json.dumps(self.extras["canary_finetune"], indent=1))
            self.timings["canary_finetune_s"] = self.extras["canary_finetune"]["seconds"]
        self.runners = probe_runners(lm, tuned, soft, options)
        self.probe_t0 = time.time()

    def batches(self, todo: Sequence[Any], policy: BatchPolicy) -> Iterable[list[Any]]:
        """Consecutive items of the same runner, up to the batch size (16 with ``auto``, fewer
        after an out-of-memory back-off), so generation and scoring run batched while each
        sample is still flushed on its own."""
        size = policy.batch_size or min(16, policy.max_in_flight or 16)
        chunk: list[Any] = []
        for task in todo:
            if chunk and (len(chunk) >= size or task.runner != chunk[0].runner):
                yield chunk
                chunk = []
            chunk.append(task)
        if chunk:
            yield chunk

    def measure(self, lm: LanguageModel, items: Sequence[Any]) -> list[dict[str, Any]]:
        rows = self.runners[items[0].runner]([t.item for t in items])
        out = [{"mode": t.mode, "variant": t.variant, "group": t.group, "shots_k": t.k, **row}
               for t, row in zip(items, rows)]
        for row in out:
            if row["mode"] == "in-context" and "token_influence" in row \
                    and self.settings["leak_maps"]:
                row["leak_map"] = self._leak_map(lm, row)
        return out

    def _leak_map(self, lm: LanguageModel, row: dict[str, Any]) -> dict[str, Any] | None:
        """Where the subject's documents leaked into this in-context answer (Def. 3.1-3.2 of
        "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" over
        the documents' windows): stored in the record, so the report and a
        loaded result render it without a model. It scores the answer under every window's
        deletion (8-token windows, stride 4): ``leak_maps=False`` skips it."""
        if not hasattr(self, "_documents"):
            self._documents = {r.subject_id: "\n".join(r.documents) for r in self.records}
        documents = self._documents.get(row["subject"])
        if not documents:
            return None
        return in_context_map(lm, row, documents, self.settings["context_template"],
                              chat=self.common.chat_template == "on")

    # ---- summary and report ------------------------------------------------------------------
    def requires(self) -> dict[str, str]:
        s = self.settings
        return probe_needs(s["mode"], bool(s["generate"]), s["canary"])

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if hasattr(self, "probe_t0"):
            self.timings["probing_s"] = time.time() - self.probe_t0
            say(f"probed {len(records)} prompts in {self.timings['probing_s']:.1f}s")
        s, extras = self.settings, self.extras
        summaries = summarize_probes(records, by=GROUP_BY)
        for g in summaries:
            g["label"] = group_label(g)
        summary: dict[str, Any] = {"groups": summaries, "skipped": self.plan.skipped,
                                   "n_subjects": len(self.records), "timings_s": self.timings,
                                   "max_new_tokens": extras.get("max_new_tokens")}
        if s["canary"] is not None:
            tuned = [g for g in summaries if g["mode"] == "canary"
                     and g["variant"] in ("fine-tuned", "fine-tuned-likelihood")]
            summary["canary"] = {"verdict": canary_verdict(tuned, s["alpha"]),
                                 "finetune": extras.get("canary_finetune")}
            if s["canary_baseline"]:
                base = [g for g in summaries if g["mode"] == "canary"
                        and g["variant"] in ("base", "base-likelihood")]
                summary["canary"]["baseline_verdict"] = canary_verdict(base, s["alpha"])
        if "white_box_training" in extras:
            summary["white_box"] = {t: {k: v for k, v in d.items() if k != "history"}
                                    for t, d in extras["white_box_training"].items()}
        summary["significance"] = {"alpha": s["alpha"],
                                   "groups": significance(summaries, s["alpha"])}
        # exact PII strings generated (None: likelihoods only, nothing generated)
        summary["hits"] = len(hits(records)) if generated(records) else None
        summary["units"] = dict(VERDICT_UNITS)
        summary["verdict"] = probe_verdict(summaries, records, s["alpha"])
        return summary

    def provenance_extra(self, lm: LanguageModel) -> dict[str, Any]:
        return {"prompt_templates": template_texts(self.settings)}
