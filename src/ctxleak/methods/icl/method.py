"""The ICLInf Method (Evaluating Privacy Leakage From In-Context Learning §3-4, App. B, E.1): one
record per (shots, query) with the loss of every exemplar and ICLInf_j; summarised as mean ± std per
shots and variant (Eq. 4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.icl import LabelScorer, PromptBuilder, query_id, summarize_records
from ctxleak.methods.icl.data import ICLTask, load_task
from ctxleak.methods.icl.params import (
    ICLInfParams,
    parse_shots,
    resolve_calibration,
    resolve_spaces,
)
from ctxleak.methods.icl.pipeline import measure_queries, select_queries
from ctxleak.methods.icl.verdict import UNITS as VERDICT_UNITS
from ctxleak.methods.icl.verdict import by_exemplar, by_position, icl_verdict
from ctxleak.methods.needs import iclinf as iclinf_needs
from ctxleak.run.inputs import describe, is_path
from ctxleak.run.method import ItemIds, ParamsMethod, Plan, batches_by_cost
from ctxleak.run.rundir import RunDir
from ctxleak.run.runner import say

__all__ = ["ICLInfMethod", "ICLInfParams", "parse_shots", "resolve_calibration",
           "resolve_spaces"]


#: One work item: (number of shots, the query's row in the test set).
Item = tuple[int, int]


@dataclass(frozen=True)
class Queries:
    """What reading the data prepared: the task (train and test examples, labels, format) and
    the test rows chosen as queries."""

    task: ICLTask
    chosen: list[int]


@dataclass(frozen=True)
class Ready:
    """The queries, with the prompt builder and the label scorer of the loaded model."""

    queries: Queries
    builder: PromptBuilder
    scorer: LabelScorer


class ICLInfMethod(ParamsMethod[Item, Queries, Ready, ICLInfParams]):
    """ICLInf of labelled data (``ctxleak icl``). ``common``: the run options; ``params``: the
    method's own (:class:`ICLInfParams`)."""

    name = "icl"
    desc = "icl queries"
    params_type = ICLInfParams

    def derive(self) -> None:
        self.shots = parse_shots(self.params.shots)
        self.icl = self.params.icl()
        self.chat = self.common.chat_template == "on"

    def plan(self, data: Any) -> Plan[Item, Queries]:
        p = self.params
        task = load_task(data, p.test_data, split_field=p.split, text_field=p.text_field,
                         label_field=p.label_field, labels=p.labels, fmt=p.format,
                         instruction=p.instruction, exemplar_template=p.exemplar_template,
                         query_template=p.query_template)
        task.check_shots(self.shots)
        queries = p.queries
        chosen = select_queries(len(task.test), queries, self.common.seed)
        asked = queries if self.common.limit is None else min(queries, self.common.limit)
        if asked > len(task.test):
            say(f"the test set has {len(task.test)} examples, fewer than the {asked} queries "
                "asked for: using all of them as queries")
        if self.common.limit is not None:
            chosen = chosen[:self.common.limit]
        fmt = task.fmt
        config = {"data": describe(data), "test_data": describe(p.test_data)
                  if p.test_data is not None else None, "split": p.split,
                  "text_field": p.text_field, "label_field": p.label_field,
                  "labels": list(task.labels), "queries": p.queries, "format": fmt.name,
                  "instruction": fmt.instruction, "exemplar_template": fmt.exemplar,
                  "query_template": fmt.query, "shots": self.shots, "icl": self.icl.to_dict()}

        def given(name: str, value: Any) -> Any:  # rows in memory are hashed as themselves
            return task.source.get(name) if value is None or is_path(value) else value

        # ICL prompts are completions ending in 'Answer:': the chat template only when asked for
        return Plan(items=[(n, j) for n in self.shots for j in chosen], config=config,
                    state=Queries(task, list(chosen)),
                    inputs={"data": given("train", data), "test_data": given("test",
                                                                             p.test_data)},
                    load_options={"chat_template": "on" if self.chat else "off"})

    def ids(self, item: Item) -> ItemIds:
        """The key names the shots; the id is the query's row in the test set, numbered from 0
        as rows without an id are."""
        return ItemIds(query_id(*item), str(item[1]))

    def prepare(self, lm: LanguageModel, plan: Plan[Item, Queries], run: RunDir) -> Ready:
        task, chosen = plan.state.task, plan.state.chosen
        builder = PromptBuilder(lm, task.fmt, task.labels, chat=self.chat,
                                max_text_tokens=self.icl.max_text_tokens)
        scorer = LabelScorer(lm, task.labels, self.icl.label_scoring, builder.label_prefix)
        say(f"{len(task.train)} training examples, {len(chosen)} queries, labels "
            f"{', '.join(task.labels)}; shots {self.shots}; variants "
            f"{', '.join(self.icl.variants)} -> {run.path}")
        return Ready(plan.state, builder, scorer)

    def batches(self, ready: Ready, items: Sequence[Item],
                policy: BatchPolicy) -> list[list[Item]]:
        """The query's prompts in flight: the full one and one per left-out exemplar (plus the
        content-free ones when calibrating), each about the shots' texts long."""
        texts = self.icl.max_text_tokens or 128
        costs: list[int | None] = [
            (n + 1) * (4 if self.icl.calibrated else 1) * (n + 1) * (texts + 8)
            for n, _ in items]
        return list(batches_by_cost(items, costs, policy))

    def measure(self, lm: LanguageModel, ready: Ready,
                items: Sequence[Item]) -> list[dict[str, Any]]:
        """The queries measured together: their full and leave-one-out prompts in one engine
        call, each query's prompts reusing its own full prompt's prefix."""
        return measure_queries(lm, ready.queries.task, ready.builder, ready.scorer, self.icl,
                               list(items), self.common.seed)

    def requires(self) -> dict[str, str]:
        return iclinf_needs()

    def summarize(self, ready: Ready, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        task, chosen = ready.queries.task, ready.queries.chosen
        variants = self.icl.variants
        summary = summarize_records(records, variants)
        first = summary[str(self.shots[0])][variants[0]]
        seconds = [r["seconds"] for r in records]
        headline = {"shots": self.shots[0], "variant": variants[0],
                    "ICLInf mean": first["iclinf_mean"], "ICLInf std": first["iclinf_std"],
                    "accuracy": first["accuracy"],
                    "queries": first["n"],
                    "seconds per query": round(sum(seconds) / max(len(seconds), 1), 3)}
        out = {"iclinf": summary, "labels": list(task.labels), "shots": self.shots,
               "variants": variants, "headline": headline, "n_queries": len(chosen),
               "query_indices": chosen, "time_per_query_s": headline["seconds per query"],
               "truncated_texts": sum(r.get("truncated_texts", 0) for r in records),
               "source": task.source}
        out["by_exemplar"] = by_exemplar(records, self.shots[0], variants[0])
        out["by_position"] = by_position(first["mean_loss_by_position"])
        out["units"] = dict(VERDICT_UNITS)
        out["verdict"] = icl_verdict(out, records)
        return out

    def provenance(self, lm: LanguageModel, ready: Ready) -> dict[str, Any]:
        task = ready.queries.task
        fmt = task.fmt
        template = {"instruction": fmt.instruction_text(task.labels), "exemplar": fmt.exemplar,
                    "query": fmt.query, "chat_template": self.chat,
                    "label_prefix": ready.builder.label_prefix}
        label_tokens = {lab: seq for lab, seq in zip(task.labels, ready.scorer.sequences)}
        return {"prompt_template": template, "label_tokens": label_tokens}
