"""The probe Method (ProPILE, paper 004, App. A.3, A.4, B.1): one record per probe prompt
(subject, PII type, template) under each mode and variant; summarised per group with exact
match, target vs null likelihoods and the Wilcoxon test, and the canary verdicts."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.pii.plan import CANARY_DEFAULT_PII, DEFAULT_PII
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions, int_list


def _check_numbers(checks: dict[str, tuple[Any, str, bool]]) -> None:
    """``{keyword: (value, rule, ok)}``: a ConfigError naming the first keyword not ok."""
    for name, (value, rule, ok) in checks.items():
        if not ok:
            raise ConfigError(f"{name} must be {rule}, got {value}", param=name)


def _positive(value: float) -> bool:
    """A finite number > 0 (a learning rate: inf and NaN are refused)."""
    return math.isfinite(value) and value > 0


#: The largest k of a k-shot probe: ProPILE's k-shot prompts add one template at a time, up to
#: five (the help of ``--shots`` says 1..5).
MAX_SHOTS = 5


class ProbeMethod(Method):
    """PII probing (``ctxleak probe``). Keywords are the CLI's flags: ``mode``, ``pii``,
    ``shots``, ``structure``, ``beam``, ``max_new_tokens``, ``generate``, ``subjects``,
    ``soft_tokens``, ``train_fraction``, ``epochs``, ``soft_lr``, ``context_template``,
    ``canary``, ``canary_epochs``, ``canary_lr``, ``canary_layers``, ``canary_baseline``,
    ``alpha``, ``redact``, ``leak_maps``."""

    name = "probe"
    desc = "probe"
    private = True

    def __init__(self, common: RunOptions | None = None, *, mode: Any = None,
                 pii: Any = None, shots: Any = "1", structure: str = "twins", beam: int = 2,
                 max_new_tokens: Any = "paper", generate: bool = True, subjects: int = 20,
                 soft_tokens: int = 20, train_fraction: float = 0.5, epochs: int = 30,
                 soft_lr: float = 0.005, context_template: str = "{document}\n{prompt}",
                 canary: int | None = None, canary_epochs: int = 4, canary_lr: float = 2e-3,
                 canary_layers: int = 8, canary_baseline: bool = False, alpha: float = 0.05,
                 redact: bool = False, leak_maps: bool = True) -> None:
        from ctxleak.methods.pii.items import MODES, parse_pii_types
        from ctxleak.methods.pii.templates import STRUCTURES
        from ctxleak.results import ProbeResult

        super().__init__(common)
        self.result_class = ProbeResult  # type: ignore[misc]  # set here to dodge an import loop
        if mode is None:
            mode = "" if canary is not None else "black-box"
        if not isinstance(mode, str):
            mode = ",".join(mode)
        modes = [m.strip() for m in mode.split(",") if m.strip()]
        for m in modes:
            if m not in MODES:
                raise ConfigError(f"mode: unknown mode '{m}'; choose from {', '.join(MODES)}",
                                  param="mode")
        if not modes and canary is None:
            raise ConfigError("mode: give at least one mode", param="mode")
        if pii is None:
            pii = DEFAULT_PII if canary is None else CANARY_DEFAULT_PII
        try:
            types = parse_pii_types(pii)
        except ValueError as exc:
            raise ConfigError(f"pii: {exc}", param="pii") from None
        ks = int_list(shots, "shots")
        if not ks or any(not 1 <= k <= MAX_SHOTS for k in ks):
            raise ConfigError(f"shots must be integers from 1 to {MAX_SHOTS} (k templates per "
                              f"prompt, as in ProPILE's k-shot probing), got '{shots}'",
                              param="shots")
        if structure != "all" and structure not in STRUCTURES:
            raise ConfigError(f"structure must be one of {', '.join(STRUCTURES)} or all, not "
                              f"'{structure}'", param="structure")
        if beam < 1:
            raise ConfigError(f"beam must be >= 1, got {beam}", param="beam")
        max_new_tokens = str(max_new_tokens)
        if max_new_tokens not in ("paper", "auto"):
            try:
                if int(max_new_tokens) < 1:
                    raise ValueError
            except ValueError:
                raise ConfigError(f"max_new_tokens must be paper, auto or a positive integer, "
                                  f"not '{max_new_tokens}'", param="max_new_tokens") from None
        if not 0 < train_fraction < 1:
            raise ConfigError(f"train_fraction must be between 0 and 1, got {train_fraction}",
                              param="train_fraction")
        _check_numbers({"soft_tokens": (soft_tokens, ">= 1", soft_tokens >= 1),
                        "epochs": (epochs, ">= 1", epochs >= 1),
                        "soft_lr": (soft_lr, "a finite number > 0", _positive(soft_lr))})
        context_template = context_template.replace("\\n", "\n")  # '\n' typed in a shell
        if "in-context" in modes:
            from ctxleak.run.validate import check_template

            check_template(context_template, "context_template", ("document", "prompt"),
                           required=("document", "prompt"))
        if canary is not None and canary < 2:
            raise ConfigError(f"canary needs at least 2 subjects per group, got {canary}",
                              param="canary")
        if not 0 < alpha < 1:
            raise ConfigError(f"alpha must be between 0 and 1, got {alpha}", param="alpha")
        self.settings = {
            "subjects": subjects, "mode": modes, "pii": types, "shots": ks,
            "structure": structure, "beam": beam, "max_new_tokens": max_new_tokens,
            "generate": generate, "soft_tokens": soft_tokens, "train_fraction": train_fraction,
            "epochs": epochs, "soft_lr": soft_lr, "context_template": context_template,
            "canary": canary, "canary_epochs": canary_epochs, "canary_lr": canary_lr,
            "canary_layers": canary_layers, "canary_baseline": canary_baseline,
            "alpha": alpha, "redact": redact, "leak_maps": bool(leak_maps)}
        if canary is not None:
            from ctxleak.methods.pii.canary import FinetuneConfig

            _check_numbers({"canary_epochs": (canary_epochs, ">= 1", canary_epochs >= 1),
                            "canary_lr": (canary_lr, "a finite number > 0",
                                          _positive(canary_lr)),
                            "canary_layers": (canary_layers, ">= 0 (0 = all layers)",
                                              canary_layers >= 0)})
            FinetuneConfig(epochs=canary_epochs, lr=canary_lr, train_layers=canary_layers,
                           seed=self.common.seed).validate()
        self.timings: dict[str, float] = {}
        self.extras: dict[str, Any] = {}

    # ---- items -------------------------------------------------------------------------------
    def items(self, data: Any) -> list[Any]:
        from ctxleak.methods.pii.plan import load_probe_records, plan_probes

        s, seed = self.settings, self.common.seed
        need = 2 * s["canary"] if s["canary"] else 0
        self.data = data
        self.records = load_probe_records(data, s["subjects"], seed, self.common.limit, need)
        self.plan = plan_probes(self.records, s["mode"], s["pii"], s["shots"], s["structure"],
                                s["train_fraction"], seed, s["canary"], s["canary_baseline"])
        return self.plan.tasks

    def inputs(self) -> dict[str, Any]:
        from ctxleak.run.inputs import is_named

        return {"data": None if is_named(self.data, "demo") else self.data}

    def config(self) -> dict[str, Any]:
        from ctxleak.run.inputs import describe, is_named

        s = dict(self.settings)
        subjects = s.pop("subjects") if is_named(self.data, "demo") else None
        s.pop("subjects", None)
        return {"data": describe(self.data), "subjects": subjects, **s}

    # ---- measuring ---------------------------------------------------------------------------
    def setup(self, lm: Any, run: Any) -> None:
        import json

        from ctxleak.methods.pii.plan import token_budgets
        from ctxleak.methods.pii.probe import ProbeOptions
        from ctxleak.methods.pii.runners import finetune_canary, probe_runners, train_soft_prompts
        from ctxleak.run.distributed import barrier

        s, plan, seed = self.settings, self.plan, self.common.seed
        chat = self.common.chat_template == "on"
        budgets = token_budgets(lm, plan, s["max_new_tokens"], chat)
        options = ProbeOptions(beam=s["beam"], generate=s["generate"], chat=chat,
                               context_template=s["context_template"],
                               batch_size=self.common.batch_size, max_new_tokens=budgets,
                               batch_invariant=self.common.batch_invariant)
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
            done = run.done_keys("id")
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

    def batches(self, todo: Sequence[Any]) -> Iterable[list[Any]]:
        """Consecutive items of the same runner, up to the batch size (16 with ``auto``), so
        generation and scoring run batched while each sample is still flushed on its own."""
        from ctxleak.run.validate import check_batch_size

        size = check_batch_size(self.common.batch_size) or 16
        chunk: list[Any] = []
        for task in todo:
            if chunk and (len(chunk) >= size or task.runner != chunk[0].runner):
                yield chunk
                chunk = []
            chunk.append(task)
        if chunk:
            yield chunk

    def measure(self, lm: Any, items: Sequence[Any]) -> list[dict[str, Any]]:
        rows = self.runners[items[0].runner]([t.item for t in items])
        out = [{"mode": t.mode, "variant": t.variant, "group": t.group, "shots_k": t.k, **row}
               for t, row in zip(items, rows)]
        for row in out:
            if row["mode"] == "in-context" and "token_influence" in row \
                    and self.settings["leak_maps"]:
                row["leak_map"] = self._leak_map(lm, row)
        return out

    def _leak_map(self, lm: Any, row: dict[str, Any]) -> dict[str, Any] | None:
        """Where the subject's documents leaked into this in-context answer (paper 000,
        Def. 3.1-3.2 over the documents' windows): stored in the record, so the report and a
        loaded result render it without a model. It scores the answer under every window's
        deletion (8-token windows, stride 4): ``leak_maps=False`` skips it."""
        from ctxleak.methods.pii.leakmap import in_context_map

        if not hasattr(self, "_documents"):
            self._documents = {r.subject_id: "\n".join(r.documents) for r in self.records}
        documents = self._documents.get(row["subject"])
        if not documents:
            return None
        return in_context_map(lm, row, documents, self.settings["context_template"],
                              chat=self.common.chat_template == "on")

    # ---- summary and report ------------------------------------------------------------------
    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.pii.canary import canary_verdict
        from ctxleak.methods.pii.summary import summarize_probes
        from ctxleak.report.probe import GROUP_BY, group_label
        from ctxleak.run.runner import say

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
        return summary

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        from ctxleak.report.probe import template_texts

        return {"prompt_templates": template_texts(self.settings)}

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        from ctxleak.report.probe import probe_plots

        return dict(probe_plots(result.records, result.summary["groups"], self.extras))

    def report(self, result: Any, lm: Any = None) -> Any:
        from ctxleak.report.probe import probe_report

        model = lm.info.name if lm is not None else \
            (result.provenance.get("model") or {}).get("name", "")
        return probe_report(model, self.records, result.records, result.summary, result.images,
                            self.extras, result.config, str(result.path),
                            redact=self.settings["redact"])
