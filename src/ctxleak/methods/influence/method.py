"""The influence Method (paper 000, Def. 3.3): one CID response per (setting, example), its token,
response and n-gram influence; summarised per setting. Run by :func:`ctxleak.run.run_method`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.engine.generation import derive_seed
from ctxleak.methods.influence.data import load_examples, template_for
from ctxleak.methods.influence.params import InfluenceParams, parse_ngram
from ctxleak.methods.influence.pipeline import (
    Setting,
    example_parts,
    measure_examples,
    summarize_setting,
)
from ctxleak.methods.influence.quality import quality_scores
from ctxleak.methods.needs import influence as influence_needs
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

    def config(self, data: Any) -> dict[str, Any]:
        return {"data": describe(data), **self.params.to_config()}

    def items(self, data: Any) -> list[tuple[Setting, Any]]:
        fields = self.params.fields
        rename = fields if isinstance(fields, Mapping) else parse_mapping(fields)
        limit = self.common.limit
        examples = load_examples(data, task=self.params.task, rename=rename,
                                 template=self.params.template, limit=limit)
        self.examples = examples[:limit] if limit is not None else examples
        self.index = {ex.id: i for i, ex in enumerate(self.examples)}
        return [(setting, ex) for setting in self.grid for ex in self.examples]

    def inputs(self, data: Any) -> dict[str, Any]:
        return {"data": demo_path("influence.jsonl") if is_named(data, "demo") else data}

    def key(self, item: tuple[Setting, Any]) -> str:
        setting, ex = item
        return f"{ex.id}|{setting.key}"

    def setup(self, lm: Any, run: Any) -> None:
        self.lm = lm  # to count the token slots of an item (batch_cost)

    def batch_cost(self, item: tuple[Setting, Any]) -> int | None:
        """Two CID streams, each its prompt plus the new tokens (the generation's KV cache)."""
        setting, ex = item
        lm = getattr(self, "lm", None)
        if lm is None:
            return None
        parts, _ = example_parts(lm, ex, setting, self.options)
        return len(parts.full) + len(parts.empty) + 2 * self.options.max_new_tokens

    def measure(self, lm: Any, items: Sequence[tuple[Setting, Any]]) -> list[dict[str, Any]]:
        """CID responses and influence of the items, measured together (one batched KV cache for
        generation, one planner for n-gram scoring); each item samples from its own seed,
        (run seed, example index), the same across settings and batches."""
        jobs = [(ex, setting, derive_seed(self.common.seed, self.index[ex.id]))
                for setting, ex in items]
        return measure_examples(lm, jobs, self.options)

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
                summary = summarize_setting(rows, seed=self.common.seed)
                examples_of = [by_id[r["id"].rsplit("|", 1)[0]] for r in rows]
                summary["quality"] = quality_scores(
                    [r["response"] for r in rows], [ex.reference for ex in examples_of],
                    [ex.context for ex in examples_of], bertscore_model, factkb_model)
                summaries.append(summary)
        return {"settings": summaries}

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        return {"prompt_templates": {ex.task: template_for(ex, self.options.template)
                                     for ex in self.examples}}
