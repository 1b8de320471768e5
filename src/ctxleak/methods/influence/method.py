"""The influence Method (Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models, Def. 3.3): one CID response per (setting, example), its token, response and n-gram
influence; summarised per setting. Run by :func:`ctxleak.run.run_method`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.influence.control import ControlCost, control_indices
from ctxleak.methods.influence.data import InfluenceExample, load_examples, template_for
from ctxleak.methods.influence.params import InfluenceParams, parse_ngram
from ctxleak.methods.influence.pipeline import example_parts, measure_examples
from ctxleak.methods.influence.quality import quality_scores
from ctxleak.methods.influence.roads import influence_needs
from ctxleak.methods.influence.setting import Setting
from ctxleak.methods.influence.summary import summarize_setting
from ctxleak.methods.influence.verdict import run_verdict
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.records import demo_path, parse_mapping

__all__ = ["InfluenceMethod", "InfluenceParams", "parse_ngram"]


class InfluenceMethod(Method):
    """Expected context influence of a dataset under CID (``ctxleak influence``).

    ``common``: the run options; ``params``: the method's own (:class:`InfluenceParams`).
    """

    name = "influence"
    desc = "influence"
    private = True

    def __init__(self, common: RunOptions | None = None,
                 params: InfluenceParams | None = None) -> None:
        super().__init__(common)
        self.params = params if params is not None else InfluenceParams()
        self.options = self.params.options()
        self.grid = self.params.grid()
        self.examples: list[Any] = []
        self.cost = ControlCost()  # the control's forward passes and seconds (this process)

    def config(self, data: Any) -> dict[str, Any]:
        return {"data": describe(data), **self.params.to_config()}

    def items(self, data: Any) -> list[tuple[Setting, Any]]:
        fields = self.params.fields
        rename = fields if isinstance(fields, Mapping) else parse_mapping(fields)
        limit = self.common.limit
        examples = load_examples(data, task=self.params.task, rename=rename,
                                 template=self.params.template, limit=limit,
                                 passages=self.params.passages)
        self.examples = examples[:limit] if limit is not None else examples
        self.index = {ex.id: i for i, ex in enumerate(self.examples)}
        # the control of example k: example k-1's context under k's query (control.py)
        self.controls = [None if c is None else self.examples[c]
                         for c in control_indices(len(self.examples))]
        return [(setting, ex) for setting in self.grid for ex in self.examples]

    def inputs(self, data: Any) -> dict[str, Any]:
        return {"data": demo_path("influence.jsonl") if is_named(data, "demo") else data}

    def key(self, item: tuple[Setting, Any]) -> str:
        setting, ex = item
        return f"{ex.id}|{setting.key}"

    def example_id(self, item: tuple[Setting, Any]) -> str | int:
        """The example's own id (its setting is in the columns ``setting``, ``lambda``,
        ``temperature`` and ``context_limit``)."""
        return item[1].id

    def setup(self, lm: LanguageModel, run: Any) -> None:
        self.lm = lm  # to count the token slots of an item (batch_cost)

    def batch_cost(self, item: tuple[Setting, Any]) -> int | None:
        """Two CID streams, each its prompt plus the new tokens (the generation's KV cache)."""
        setting, ex = item
        lm = getattr(self, "lm", None)
        if lm is None:
            return None
        parts, _ = example_parts(lm, ex, setting, self.options)
        return len(parts.full) + len(parts.empty) + 2 * self.options.max_new_tokens

    def measure(self, lm: LanguageModel, items: Sequence[tuple[Setting, Any]]) -> list[dict[str, Any]]:
        """CID responses and influence of the items, measured together (one batched KV cache for
        generation, one planner for n-gram scoring); each item samples from its own seed,
        (run seed, example index), the same across settings and batches."""
        start = time.perf_counter()
        jobs = [(ex, setting, derive_seed(self.common.seed, self.index[ex.id]))
                for setting, ex in items]
        controls = [self._control(ex) for _, ex in items] if self.options.control else None
        records = measure_examples(lm, jobs, self.options, controls=controls,
                                   cost=self.cost)
        for (setting, _), record in zip(items, records):  # the sweep's context size, None: all
            record.setdefault("context_limit", setting.context_tokens)
        self.cost.measure_seconds += time.perf_counter() - start
        return records

    def _control(self, ex: InfluenceExample) -> InfluenceExample | None:
        """The control example of ``ex``: the previous example's context (and passages) with
        ``ex``'s query and task; None with a single example."""
        other = self.controls[self.index[ex.id]]
        if other is None:
            return None
        return replace(ex, context=other.context, passages=other.passages, reference=None,
                       id=other.id)

    def requires(self) -> dict[str, str]:
        return influence_needs([s.lam for s in self.grid], [s.temperature for s in self.grid],
                               self.options.bounded_eps)

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        by_id = {ex.id: ex for ex in self.examples}
        bertscore_model, factkb_model = self.params.bertscore_model, self.params.factkb_model
        summaries = []
        for setting in self.grid:
            rows = [r for r in records if r["setting"] == setting.key]
            if rows:
                cost = self.cost.to_dict() if self.cost.examples else None
                summary = summarize_setting(rows, seed=self.common.seed, control_cost=cost)
                examples_of = [by_id[r["id"]] for r in rows]
                summary["quality"] = quality_scores(
                    [r["response"] for r in rows], [ex.reference for ex in examples_of],
                    [ex.context for ex in examples_of], bertscore_model, factkb_model)
                summaries.append(summary)
        return {"verdict": run_verdict(summaries), "settings": summaries}

    def provenance_extra(self, lm: LanguageModel) -> dict[str, Any]:
        return {"prompt_templates": {ex.task: template_for(ex, self.options.template)
                                     for ex in self.examples}}
