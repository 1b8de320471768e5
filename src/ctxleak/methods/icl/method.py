"""The ICLInf Method (paper 001 §3-4, App. B, E.1): one record per (shots, query) with the loss
of every exemplar and ICLInf_j; summarised as mean ± std per shots and variant (Eq. 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions, int_list


def resolve_calibration(calibrate: bool, calibration: str | None) -> tuple[bool, ...]:
    """``calibrate`` (= on) or ``calibration`` off|on|both -> the settings to report."""
    if calibration is None:
        return (True,) if calibrate else (False,)
    table = {"off": (False,), "on": (True,), "both": (False, True)}
    value = str(calibration).strip().lower()
    if value not in table:
        raise ConfigError(f"calibration must be off, on or both, not '{calibration}'",
                          param="calibration")
    if calibrate and value == "off":
        raise ConfigError("calibrate contradicts calibration off", param="calibrate")
    return table[value]


def resolve_spaces(output_space: str) -> tuple[str, ...]:
    table = {"labels": ("labels",), "vocab": ("vocab",), "both": ("labels", "vocab")}
    value = str(output_space).strip().lower()
    if value not in table:
        raise ConfigError(f"output_space must be labels, vocab or both, not '{output_space}'",
                          param="output_space")
    return table[value]


def parse_shots(shots: Any) -> list[int]:
    values = int_list(shots, "shots")
    if not values:
        raise ConfigError("shots needs at least one number, e.g. 4 or 1,2,4,8", param="shots")
    for n in values:
        if n < 1:
            raise ConfigError(f"shots must be at least 1, got {n}", param="shots")
    return list(dict.fromkeys(values))


class ICLInfMethod(Method):
    """ICLInf of labelled data (``ctxleak icl``). Keywords are the CLI's flags: ``test_data``,
    ``split``, ``text_field``, ``label_field``, ``labels``, ``queries``, ``fmt`` (--format),
    ``instruction``, ``exemplar_template``, ``query_template``, ``max_text_tokens``, ``shots``,
    ``calibrate``, ``calibration``, ``calibration_eps``, ``output_space``, ``label_scoring``."""

    name = "icl"
    desc = "icl queries"

    def __init__(self, common: RunOptions | None = None, *, test_data: Any = None,
                 split: str = "split", text_field: str = "text", label_field: str = "label",
                 labels: Any = None, queries: int = 100, fmt: str = "auto",
                 instruction: str | None = None, exemplar_template: str | None = None,
                 query_template: str | None = None, max_text_tokens: int = 256,
                 shots: Any = "4", calibrate: bool = False, calibration: str | None = None,
                 calibration_eps: float = 1e-6, output_space: str = "labels",
                 label_scoring: str = "first-token") -> None:
        from ctxleak.methods.icl.pipeline import ICLConfig
        from ctxleak.results import ICLInfResult

        super().__init__(common)
        self.result_class = ICLInfResult  # type: ignore[misc]  # set here to dodge an import loop
        self.shots = parse_shots(shots)
        self.icl = ICLConfig(output_spaces=resolve_spaces(output_space),
                             calibration=resolve_calibration(calibrate, calibration),
                             label_scoring=label_scoring, calibration_eps=calibration_eps,
                             max_text_tokens=max_text_tokens)
        if queries < 1:
            raise ConfigError(f"queries must be at least 1, got {queries}", param="queries")
        self.queries = queries
        self.test_data, self.split = test_data, split
        self.text_field, self.label_field, self.labels = text_field, label_field, labels
        self.fmt, self.instruction = fmt, instruction
        self.exemplar_template, self.query_template = exemplar_template, query_template
        self.chat = self.common.chat_template == "on"
        self.data: Any = None

    def items(self, data: Any) -> list[tuple[int, int]]:
        from ctxleak.methods.icl import load_task, select_queries
        from ctxleak.run.runner import say

        self.data = data
        task = load_task(data, self.test_data, split_field=self.split,
                         text_field=self.text_field, label_field=self.label_field,
                         labels=self.labels, fmt=self.fmt, instruction=self.instruction,
                         exemplar_template=self.exemplar_template,
                         query_template=self.query_template)
        task.check_shots(self.shots)
        chosen = select_queries(len(task.test), self.queries, self.common.seed)
        if self.queries > len(task.test):
            say(f"the test set has {len(task.test)} examples: using all of them as queries")
        if self.common.limit is not None:
            chosen = chosen[:self.common.limit]
        self.task, self.chosen = task, chosen
        return [(n, j) for n in self.shots for j in chosen]

    def config(self) -> dict[str, Any]:
        from ctxleak.run.inputs import describe

        fmt = self.task.fmt
        return {"data": describe(self.data), "test_data": describe(self.test_data)
                if self.test_data is not None else None, "split": self.split,
                "text_field": self.text_field, "label_field": self.label_field,
                "labels": list(self.task.labels), "queries": self.queries, "format": fmt.name,
                "instruction": fmt.instruction, "exemplar_template": fmt.exemplar,
                "query_template": fmt.query, "shots": self.shots, "icl": self.icl.to_dict()}

    def inputs(self) -> dict[str, Any]:
        from ctxleak.run.inputs import is_path

        def given(name: str, data: Any) -> Any:  # rows in memory are hashed as themselves
            return self.task.source.get(name) if data is None or is_path(data) else data

        return {"data": given("train", self.data), "test_data": given("test", self.test_data)}

    def key(self, item: tuple[int, int]) -> str:
        from ctxleak.methods.icl import query_id

        return query_id(*item)

    def load_options(self) -> dict[str, Any]:
        # ICL prompts are completions ending in 'Answer:': the chat template only when asked for
        return {"chat_template": "on" if self.chat else "off"}

    def setup(self, lm: Any, run: Any) -> None:
        from ctxleak.methods.icl import LabelScorer, PromptBuilder
        from ctxleak.run.runner import say

        task = self.task
        self.builder = PromptBuilder(lm, task.fmt, task.labels, chat=self.chat,
                                     max_text_tokens=self.icl.max_text_tokens)
        self.scorer = LabelScorer(lm, task.labels, self.icl.label_scoring,
                                  self.builder.label_prefix)
        say(f"{len(task.train)} training examples, {len(self.chosen)} queries, labels "
            f"{', '.join(task.labels)}; shots {self.shots}; variants "
            f"{', '.join(self.icl.variants)} -> {run.path}")

    def batch_cost(self, item: tuple[int, int]) -> int | None:
        """The query's prompts in flight: the full one and one per left-out exemplar (plus the
        content-free ones when calibrating), each about the shots' texts long."""
        n_shots, _ = item
        texts = self.icl.max_text_tokens or 128
        prompts = (n_shots + 1) * (4 if self.icl.calibrated else 1)
        return prompts * (n_shots + 1) * (texts + 8)

    def measure(self, lm: Any, items: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
        """The queries measured together: their full and leave-one-out prompts in one engine
        call, each query's prompts reusing its own full prompt's prefix."""
        from ctxleak.methods.icl.pipeline import measure_queries

        return self.each_alone(items, lambda some, size: measure_queries(
            lm, self.task, self.builder, self.scorer, self.icl, some, self.common.seed,
            batch_size=size))

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.icl import summarize_records
        from ctxleak.report.icl import _fmt_pm, _pct

        variants = self.icl.variants
        summary = summarize_records(records, variants)
        first = summary[str(self.shots[0])][variants[0]]
        seconds = [r["seconds"] for r in records]
        headline = {"shots": self.shots[0], "variant": variants[0],
                    "ICLInf": _fmt_pm(first), "accuracy": _pct(first["accuracy"]),
                    "queries": first["n"],
                    "seconds per query": round(sum(seconds) / max(len(seconds), 1), 3)}
        return {"iclinf": summary, "labels": list(self.task.labels), "shots": self.shots,
                "variants": variants, "headline": headline, "n_queries": len(self.chosen),
                "query_indices": self.chosen, "time_per_query_s": headline["seconds per query"],
                "truncated_texts": sum(r.get("truncated_texts", 0) for r in records),
                "source": self.task.source}

    def _template(self) -> dict[str, Any]:
        fmt = self.task.fmt
        return {"instruction": fmt.instruction_text(self.task.labels), "exemplar": fmt.exemplar,
                "query": fmt.query, "chat_template": self.chat,
                "label_prefix": self.builder.label_prefix}

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        label_tokens = {lab: seq for lab, seq in zip(self.task.labels, self.scorer.sequences)}
        return {"prompt_template": self._template(), "label_tokens": label_tokens}

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        from ctxleak.report.icl import icl_plots

        return dict(icl_plots(result.summary["iclinf"], self.icl.variants, result.records))

    def report(self, result: Any, lm: Any = None) -> Any:
        from ctxleak.report.icl import icl_report

        fmt, icl = self.task.fmt, self.icl
        info = {"model": lm.info.name if lm else result.config.get("model"),
                "data": result.config.get("data"), "format": fmt.name,
                "labels": ", ".join(self.task.labels), "label scoring": icl.label_scoring,
                "output spaces": ", ".join(icl.output_spaces),
                "calibration": ", ".join("on" if c else "off" for c in icl.calibration),
                "shots": ", ".join(map(str, self.shots)), "seed": self.common.seed,
                "texts cut to --max-text-tokens": result.summary["truncated_texts"],
                "instruction": self._template()["instruction"],
                "exemplar template": fmt.exemplar, "query template": fmt.query}
        return icl_report(result.summary["iclinf"], result.records, result.images,
                          result.summary["headline"], info)
