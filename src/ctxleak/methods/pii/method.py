"""The probe Method (ProPILE: Probing Privacy Leakage in Large Language Models, App. A.3, A.4, B.1):
one record per probe prompt (subject, PII type, template) under each mode and variant; summarised
per group with exact match, target vs null likelihoods and the Wilcoxon test, and the canary
verdicts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.needs import probe as probe_needs
from ctxleak.methods.pii.canary import canary_verdict
from ctxleak.methods.pii.leakmap import in_context_map
from ctxleak.methods.pii.params import MAX_SHOTS, ProbeParams
from ctxleak.methods.pii.plan import Plan as ProbePlan
from ctxleak.methods.pii.plan import load_probe_records, plan_probes, token_budgets
from ctxleak.methods.pii.probe import ProbeOptions
from ctxleak.methods.pii.runners import finetune_canary, probe_runners, train_soft_prompts
from ctxleak.methods.pii.summary import GROUP_BY, group_label, summarize_probes
from ctxleak.methods.pii.templates import template_texts
from ctxleak.methods.pii.verdict import UNITS as VERDICT_UNITS
from ctxleak.methods.pii.verdict import generated, hits, probe_verdict, significance
from ctxleak.run.distributed import barrier
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.method import ItemIds, ParamsMethod, Plan
from ctxleak.run.rundir import RunDir
from ctxleak.run.runner import say

__all__ = ["MAX_SHOTS", "ProbeMethod", "ProbeParams"]


@dataclass(frozen=True)
class Subjects:
    """What reading the data prepared: the subjects' PII records and the probe plan (tasks,
    train items, what was skipped)."""

    records: list[Any]
    plan: ProbePlan


@dataclass
class Ready:
    """The subjects, a probing function per runner (mode, variant, PII type), and what
    preparing them took and found (token budgets, soft-prompt training, the canary's
    fine-tuning, timings in seconds)."""

    subjects: Subjects
    runners: dict[tuple[Any, ...], Callable[..., Any]]
    extras: dict[str, Any]
    timings: dict[str, float]
    probe_t0: float
    documents: dict[Any, str] = field(default_factory=dict)


class ProbeMethod(ParamsMethod[Any, Subjects, Ready, ProbeParams]):
    """PII probing (``ctxleak probe``). ``common``: the run options; ``params``: the method's
    own (:class:`ProbeParams`)."""

    name = "probe"
    desc = "probe"
    params_type = ProbeParams

    def derive(self) -> None:
        self.settings = self.params.settings()

    # ---- items -------------------------------------------------------------------------------
    def plan(self, data: Any) -> Plan[Any, Subjects]:
        s, seed = self.settings, self.common.seed
        need = 2 * s["canary"] if s["canary"] else 0
        records = load_probe_records(data, s["subjects"], seed, self.common.limit, need)
        probes = plan_probes(records, s["mode"], s["pii"], s["shots"], s["structure"],
                             s["train_fraction"], seed, s["canary"], s["canary_baseline"])
        config = dict(s)
        subjects = config.pop("subjects") if is_named(data, "demo") else None
        config.pop("subjects", None)
        return Plan(items=probes.tasks, state=Subjects(records, probes),
                    config={"data": describe(data), "subjects": subjects, **config},
                    inputs={"data": None if is_named(data, "demo") else data})

    def ids(self, item: Any) -> ItemIds:
        """The key names the prompt; the id is the subject's own (how it is probed is in
        ``mode``, ``variant``, ``group``, ``shots_k``, ``pii_type`` and ``template``)."""
        return ItemIds(str(item.key), str(item.item.subject_id))

    # ---- measuring ---------------------------------------------------------------------------
    def prepare(self, lm: LanguageModel, plan: Plan[Any, Subjects], run: RunDir) -> Ready:
        s, probes, seed = self.settings, plan.state.plan, self.common.seed
        chat = self.common.chat_template == "on"
        budgets = token_budgets(lm, probes, s["max_new_tokens"], generate=bool(s["generate"]))
        options = ProbeOptions(beam=s["beam"], generate=s["generate"], chat=chat,
                               context_template=s["context_template"], max_new_tokens=budgets)
        extras: dict[str, Any] = {"max_new_tokens": budgets}
        timings: dict[str, float] = {}
        soft: dict[str, Any] = {}
        if probes.train_items:
            t0 = time.time()
            # data-parallel: rank 0 trains and saves the soft prompts, the others then reload them
            if not run.world.is_main:
                barrier()
            soft, extras["white_box_training"] = train_soft_prompts(lm, run, probes, s,
                                                                    options, seed)
            if run.world.is_main:
                barrier()
            timings["soft_prompt_training_s"] = time.time() - t0
        tuned = None
        if s["canary"] is not None:
            done = run.done_keys()
            saved = run.path / "canary_finetune.json"
            pending = any(t.variant.startswith("fine-tuned") for i, t in enumerate(probes.tasks)
                          if run.world.owns(i) and t.key not in done)
            if saved.is_file() and not pending:  # resuming a finished run: no need to train
                extras["canary_finetune"] = json.loads(saved.read_text(encoding="utf-8"))
            else:
                tuned, extras["canary_finetune"] = finetune_canary(lm, probes, s, seed)
                run.write_file(saved.name, json.dumps(extras["canary_finetune"], indent=1))
            timings["canary_finetune_s"] = extras["canary_finetune"]["seconds"]
        return Ready(plan.state, probe_runners(lm, tuned, soft, options), extras, timings,
                     time.time())

    def batches(self, ready: Ready, todo: Sequence[Any],
                policy: BatchPolicy) -> Iterable[list[Any]]:
        """Consecutive items of the same runner, up to the batch size (16 with ``auto``, fewer
        after an out-of-memory back-off), so generation and scoring run batched while each
        sample is still flushed on its own."""
        size = policy.batch_size or min(16, policy.max_in_flight or 16)
        for _, same in groupby(todo, key=lambda task: task.runner):
            tasks = list(same)
            for start in range(0, len(tasks), size):
                yield tasks[start:start + size]

    def measure(self, lm: LanguageModel, ready: Ready,
                items: Sequence[Any]) -> list[dict[str, Any]]:
        rows = ready.runners[items[0].runner]([t.item for t in items])
        out = [{"mode": t.mode, "variant": t.variant, "group": t.group, "shots_k": t.k, **row}
               for t, row in zip(items, rows)]
        for row in out:
            if row["mode"] == "in-context" and "token_influence" in row \
                    and self.settings["leak_maps"]:
                row["leak_map"] = self._leak_map(lm, ready, row)
        return out

    def _leak_map(self, lm: LanguageModel, ready: Ready,
                  row: dict[str, Any]) -> dict[str, Any] | None:
        """Where the subject's documents leaked into this in-context answer (Def. 3.1-3.2 of
        "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" over
        the documents' windows): stored in the record, so the report and a
        loaded result render it without a model. It scores the answer under every window's
        deletion (8-token windows, stride 4): ``leak_maps=False`` skips it."""
        if not ready.documents:
            ready.documents.update({r.subject_id: "\n".join(r.documents)
                                    for r in ready.subjects.records})
        documents = ready.documents.get(row["subject"])
        if not documents:
            return None
        return in_context_map(lm, row, documents, self.settings["context_template"],
                              chat=self.common.chat_template == "on")

    # ---- summary and report ------------------------------------------------------------------
    def requires(self) -> dict[str, str]:
        s = self.settings
        return probe_needs(s["mode"], bool(s["generate"]), s["canary"])

    def summarize(self, ready: Ready, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        timings = ready.timings
        timings["probing_s"] = time.time() - ready.probe_t0
        say(f"probed {len(records)} prompts in {timings['probing_s']:.1f}s")
        s, extras = self.settings, ready.extras
        summaries = summarize_probes(records, by=GROUP_BY)
        for g in summaries:
            g["label"] = group_label(g)
        summary: dict[str, Any] = {"groups": summaries,
                                   "skipped": ready.subjects.plan.skipped,
                                   "n_subjects": len(ready.subjects.records),
                                   "timings_s": timings,
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

    def provenance(self, lm: LanguageModel, ready: Ready) -> dict[str, Any]:
        return {"prompt_templates": template_texts(self.settings)}
