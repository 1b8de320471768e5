"""The influence Method (paper 000, Def. 3.3): one CID response per (setting, example), its token,
response and n-gram influence; summarised per setting. Run by :func:`ctxleak.run.run_method`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.influence.pipeline import (
    InfluenceOptions,
    Setting,
    example_parts,
    measure_examples,
    settings_grid,
    summarize_setting,
)
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions, float_list, int_list


def parse_ngram(value: Any) -> int | None:
    """``"full"``/None (the whole context, n = |D|) or a positive window size."""
    if value is None or value == "full":
        return None
    try:
        n = int(value)
        if isinstance(value, float) and value != n:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"ngram must be 'full' or a positive integer, not '{value}'",
                          param="ngram") from None
    if n < 1:
        raise ConfigError(f"ngram must be >= 1, not {n}", param="ngram")
    return n


class InfluenceMethod(Method):
    """Expected context influence of a dataset under CID (``ctxleak influence``).

    Keywords are the CLI's flags: ``lam`` and ``temperature`` (a number, a list or a comma list:
    lists sweep), ``context_sizes`` (Fig. 2b), ``ngram``/``stride`` (Def. 3.1 windows),
    ``bounded_eps`` (App. B), ``task``/``template``/``fields``, quality models and thresholds.
    """

    name = "influence"
    desc = "influence"
    private = True

    def __init__(self, common: RunOptions | None = None, *, task: str = "auto",
                 template: str | None = None, fields: str | Mapping[str, str] | None = None,
                 lam: Any = 1.0, temperature: Any = 0.8, max_new_tokens: int = 50,
                 min_new_tokens: int | None = None, ngram: Any = "full",
                 stride: int | None = None, context_sizes: Any = None,
                 bounded_eps: float | None = None, repeat_threshold: float = 0.5,
                 rouge_threshold: float = 0.5, bertscore_model: str | None = None,
                 factkb_model: str | None = None, redact: bool = False) -> None:
        from ctxleak.results import InfluenceResult

        super().__init__(common)
        self.result_class = InfluenceResult  # type: ignore[misc]  # set here to dodge an import loop
        from ctxleak.run.validate import (
            check_limit,
            check_nonempty,
            check_number,
            check_template,
            check_unique,
        )

        if min_new_tokens is None:
            min_new_tokens = min(10, max_new_tokens)
        self.lams = list(check_nonempty(float_list(lam, "lam"), "lam", "1.0 or 0.5,1,1.5"))
        self.temps = list(check_nonempty(float_list(temperature, "temperature"), "temperature",
                                         "0.8"))
        sizes: list[int | None] = [None]
        if context_sizes is not None:
            sizes = list(check_nonempty(int_list(context_sizes, "context_sizes"),
                                        "context_sizes", "32,64,128"))
        for param, values in (("lam", self.lams), ("temperature", self.temps),
                              ("context_sizes", sizes)):
            check_unique(values, param)
        for param, threshold in (("repeat_threshold", repeat_threshold),
                                 ("rouge_threshold", rouge_threshold)):
            check_number(threshold, param, minimum=0.0, maximum=1.0)
        if stride is not None:
            check_limit(stride, "stride")
        check_template(template, "template", ("context", "query"), required=("context",))
        self.sizes = sizes
        self.options = InfluenceOptions(max_new_tokens=max_new_tokens,
                                        min_new_tokens=min_new_tokens, bounded_eps=bounded_eps,
                                        ngram=parse_ngram(ngram), stride=stride,
                                        template=template, repeat_threshold=repeat_threshold,
                                        rouge_threshold=rouge_threshold)
        self.grid = settings_grid(self.lams, self.temps, sizes)
        for setting in self.grid:  # every setting checked before anything heavy
            self.options.cid(setting)
            if setting.context_tokens is not None and setting.context_tokens < 1:
                raise ConfigError("context_sizes must be positive integers",
                                  param="context_sizes")
        self.task, self.template, self.fields = task, template, fields
        self.bertscore_model, self.factkb_model, self.redact = bertscore_model, factkb_model, redact
        self.data: Any = None
        self.examples: list[Any] = []

    def config(self) -> dict[str, Any]:
        from ctxleak.run.inputs import describe

        return {"data": describe(self.data), "task": self.task, "template": self.template,
                "fields": self.fields, "lambda": self.lams, "temperature": self.temps,
                "context_sizes": self.sizes, "bertscore_model": self.bertscore_model,
                "factkb_model": self.factkb_model,
                **{k: v for k, v in self.options.__dict__.items() if k != "template"}}

    def items(self, data: Any) -> list[tuple[Setting, Any]]:
        from ctxleak.methods.influence.data import load_examples
        from ctxleak.run.records import parse_mapping

        rename = self.fields if isinstance(self.fields, Mapping) else parse_mapping(self.fields)
        limit = self.common.limit
        examples = load_examples(data, task=self.task, rename=rename, template=self.template,
                                 limit=limit)
        self.data, self.examples = data, examples[:limit] if limit is not None else examples
        self.index = {ex.id: i for i, ex in enumerate(self.examples)}
        return [(setting, ex) for setting in self.grid for ex in self.examples]

    def inputs(self) -> dict[str, Any]:
        from ctxleak.run.inputs import is_named
        from ctxleak.run.records import demo_path

        return {"data": demo_path("influence.jsonl") if is_named(self.data, "demo") else self.data}

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
        return measure_examples(lm, jobs, self.options, self.common.batch_size,
                                batch_invariant=self.common.batch_invariant)

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.influence.quality import quality_scores

        by_id = {ex.id: ex for ex in self.examples}
        summaries = []
        for setting in self.grid:
            rows = [r for r in records if r["setting"] == setting.key]
            if rows:
                summary = summarize_setting(rows, seed=self.common.seed)
                examples_of = [by_id[r["id"].rsplit("|", 1)[0]] for r in rows]
                summary["quality"] = quality_scores(
                    [r["response"] for r in rows], [ex.reference for ex in examples_of],
                    [ex.context for ex in examples_of], self.bertscore_model, self.factkb_model)
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
                                token_strings=tokens, redact=self.redact,
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
