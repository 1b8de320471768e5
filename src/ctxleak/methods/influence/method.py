"""The influence Method (paper 000, Def. 3.3): one CID response per (setting, example), its token,
response and n-gram influence; summarised per setting. Run by :func:`ctxleak.run.run_method`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.params import InfluenceParams, parse_ngram
from ctxleak.methods.influence.pipeline import (
    Setting,
    example_parts,
    measure_examples,
    summarize_setting,
)
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
        from ctxleak.results import InfluenceResult

        super().__init__(common)
        self.result_class = InfluenceResult
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
        from ctxleak.engine.generation import derive_seed

        jobs = [(ex, setting, derive_seed(self.common.seed, self.index[ex.id]))
                for setting, ex in items]
        return measure_examples(lm, jobs, self.options)

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.influence.quality import quality_scores

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
        from ctxleak.methods.influence.data import template_for

        return {"prompt_templates": {ex.task: template_for(ex, self.options.template)
                                     for ex in self.examples}}

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        from ctxleak.report.influence import influence_plots

        return dict(influence_plots(result.summary["settings"]))

    def report(self, result: Any, lm: Any = None) -> Any:
        from ctxleak.report.influence import influence_report

        records = result.records
        tokens = lm.token_strings(records[0]["response_ids"]) if records and lm else None
        settings = result.summary["settings"]
        meta = {"model": lm.info.name if lm else result.config.get("model"),
                "examples": len(self.examples), "settings": len(self.grid),
                "run directory": str(result.path),
                "contexts cut to the window": sum(s["truncated_contexts"] for s in settings),
                "n-grams clipped to the context": sum(s["ngram_clipped"] for s in settings)}
        return influence_report(result.summary["settings"], records, result.images, meta,
                                token_strings=tokens, redact=self.params.redact,
                                tokens_of=self._tokens_of(lm, records) if lm else None)

    def _tokens_of(self, lm: Any, records: Sequence[dict[str, Any]]) -> Any:
        """Record i's (context tokens, response tokens) as strings, for its leak map: the
        context exactly as measured (same template, size cut and window cut)."""
        from functools import lru_cache

        from ctxleak.methods.influence.data import prompt_parts

        by_id = {ex.id: ex for ex in self.examples}
        settings = {s.key: s for s in self.grid}

        @lru_cache(maxsize=None)
        def tokens_of(i: int) -> tuple[list[str], list[str]]:
            r = records[i]
            setting = settings[r["setting"]]
            parts, _ = prompt_parts(lm, by_id[r["id"].rsplit("|", 1)[0]], self.options.template,
                                    setting.context_tokens,
                                    reserve=self.options.max_new_tokens)
            return lm.token_strings(list(parts.context)), lm.token_strings(r["response_ids"])

        return tokens_of
