"""The influence Method (Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models, Def. 3.3): one CID response per (setting, example), its token, response and n-gram
influence; summarised per setting. Run by :func:`ctxleak.run.run_method`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

from ctxleak.engine.batching import BatchPolicy, shared_prefixes
from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.classes import private_datastore, with_classes
from ctxleak.methods.influence.control import ControlCost, control_sets, default_controls
from ctxleak.methods.influence.data import (
    InfluenceExample,
    check_logged_ids,
    load_log,
    resolve_data,
    template_for,
)
from ctxleak.methods.influence.decoys import (
    document_control_sets,
    passage_decoys,
    uses_documents,
)
from ctxleak.methods.influence.deployment import decoding_note
from ctxleak.methods.influence.mechanism_mode import (
    check_examples,
    cid_slots,
    claim_summary,
    measure_cid,
    measure_mechanism,
    mechanism_slots,
    resolve_datastore,
)
from ctxleak.methods.influence.params import InfluenceParams, greedy_temperature, parse_ngram
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.roads import influence_needs
from ctxleak.methods.influence.setting import Setting
from ctxleak.methods.influence.summary import HEAVY_FIELDS, mechanism_reading, summarize_setting
from ctxleak.methods.influence.verdict import run_verdict
from ctxleak.methods.rag.app_prompt import app_templates, log_summary
from ctxleak.methods.rag.budgets import check_class_budgets
from ctxleak.methods.rag.documents import RetrievedDocument
from ctxleak.methods.rag.exposure import documents_summary
from ctxleak.methods.tradeoff.frontier import frontier
from ctxleak.methods.tradeoff.quality import quality_scores
from ctxleak.mitigations.datastore import Datastore
from ctxleak.run.classes import resolve_classes
from ctxleak.run.inputs import describe
from ctxleak.run.method import ItemIds, ParamsMethod, Plan, batches_by_cost
from ctxleak.run.records import parse_mapping
from ctxleak.run.rundir import RunDir
from ctxleak.run.stored import Column, select_rows, without_fields

__all__ = ["InfluenceMethod", "InfluenceParams", "parse_ngram"]


#: One work item: a setting and an example.
Item = tuple[Setting, InfluenceExample]


@dataclass(frozen=True)
class Examples:
    """What reading the data prepared: the examples, their index (the seed of example k is
    (run seed, k)) and each one's control examples (the nearest other documents' contexts,
    nearest first, :mod:`.control`)."""

    examples: list[InfluenceExample]
    index: dict[str | int, int]
    controls: list[list[InfluenceExample]]
    per_example: int = 1  # controls per example asked for (an example may have fewer)
    seed: int = 0  # the run seed: the decoy documents' draws (retrieved documents)
    # each example's decoy document per passage (retrieved documents, :mod:`.decoys`)
    decoys: list[list[RetrievedDocument | None]] = field(default_factory=list)
    traces: dict[str, int] | None = None  # a span log's answers and retriever-only traces
    # what the mechanisms retrieve from (:func:`.mechanism_mode.resolve_datastore`)
    datastore: Datastore | None = None

    def with_controls(self, per_example: int) -> Examples:
        """These examples with ``per_example`` controls each: for retrieved documents contexts
        that share no document with theirs, then decoys from the corpus
        (:func:`.decoys.document_control_sets`), with a decoy per passage
        (:func:`.decoys.passage_decoys`); otherwise other documents (:func:`control_sets`)."""
        if uses_documents(self.examples):
            return replace(self, controls=document_control_sets(self.examples, per_example,
                                                                self.seed),
                           decoys=passage_decoys(self.examples, self.seed),
                           per_example=per_example)
        sets = control_sets([ex.context for ex in self.examples], per_example)
        return replace(self, controls=[[self.examples[c] for c in cs] for cs in sets],
                       per_example=per_example)


@dataclass
class Ready:
    """The examples, the model that counts an item's token slots, and the run's control cost
    (forward passes and seconds of this process), for the hooks after loading."""

    examples: Examples
    lm: LanguageModel
    cost: ControlCost = field(default_factory=ControlCost)


class InfluenceMethod(ParamsMethod[Item, Examples, Ready, InfluenceParams]):
    """Expected context influence of a dataset under CID (``ctxleak influence``).

    ``common``: the run options; ``params``: the method's own (:class:`InfluenceParams`).
    """

    name = "influence"
    desc = "influence"
    params_type = InfluenceParams

    def derive(self) -> None:
        self.temperature_given = self.params.temperature is not None
        # a temperature the user did not give: one a served model can measure influence at
        self.params = self.params.with_default_temperature(self.common.server_url is not None)
        self.options = self.params.options()
        self.grid = self.params.grid()

    def plan(self, data: Any) -> Plan[Item, Examples]:
        fields = self.params.fields
        rename = fields if isinstance(fields, Mapping) else parse_mapping(fields)
        limit = self.common.limit
        examples, traces = load_log(data, task=self.params.task, rename=rename,
                                    template=self.params.template, limit=limit,
                                    passages=self.params.passages,
                                    log_format=self.params.log_format,
                                    app=self.params.app_choice(data))
        examples = examples[:limit] if limit is not None else examples
        if not self.temperature_given and any(ex.logged_temperature == 0 for ex in examples):
            self.params = greedy_temperature(self.params)
            self.derive()
        # the controls of example k: the nearest other documents' contexts under k's query
        # (control.py), more of them when there are few examples
        per_example = self.params.controls or default_controls(len(examples))
        check_class_budgets(self.params.budgets().classes, self.params.class_field,
                            [ex.documents for ex in examples])
        self._check_budgets_have_documents(examples)
        classes = resolve_classes(self.params.classes)
        examples = [with_classes(ex, classes) for ex in examples]  # public documents first
        datastore = private_datastore(resolve_datastore(self.params.datastore, data, examples),
                                      classes) if self.params.mechanisms else None
        for mechanism in self.params.mechanisms or ():  # before anything heavy
            check_examples(mechanism, examples, datastore)
        state = Examples(examples, {ex.id: i for i, ex in enumerate(examples)},
                         [], seed=self.common.seed, traces=traces,
                         datastore=datastore).with_controls(per_example)
        # the default, resolved from this run's number of examples, is kept for its resumes
        resolved = {} if self.params.controls is not None or not self.params.control \
            else {"resolved_controls": per_example}
        # one example's settings side by side: measured together, they share its prompts'
        # KV caches (shared_prefixes in measure)
        return Plan(items=[(setting, ex) for ex in examples for setting in self.grid],
                    config={"data": describe(data), **self.params.to_config(), **resolved},
                    state=state,
                    inputs={"data": resolve_data(data)})

    def _check_budgets_have_documents(self, examples: Sequence[Any]) -> None:
        """A leak budget (exposure, per class, per document) is kept per document: on data
        without documents or passages there is nothing it could hold, and a CI gate on it would
        pass without a word, so it is refused."""
        budgets = self.params.budgets()
        given = [name for name, on in (
            ("exposure_budget", self.params.exposure_budget is not None),
            ("class_budgets", bool(budgets.classes)),
            ("document_budgets", bool(budgets.documents))) if on]
        if given and examples and not any(ex.passages for ex in examples):
            raise ConfigError(
                f"{given[0]} is kept per retrieved document, and none of the "
                f"{len(examples)} example(s) has documents or passages: give data with a "
                "'documents' list, a span log, a retriever or passages=...", param=given[0],
                also=tuple(given[1:]))

    def ids(self, item: Item) -> ItemIds:
        """The key names the setting too; the id is the example's own (its setting is in the
        columns ``setting``, ``lambda``, ``temperature`` and ``context_limit``)."""
        setting, ex = item
        return ItemIds(f"{ex.id}|{setting.key}", ex.id)

    def prepare(self, lm: LanguageModel, plan: Plan[Item, Examples], run: RunDir) -> Ready:
        """Logged ``response_ids`` checked against the model (:func:`.data.check_logged_ids`)
        before anything is measured."""
        check_logged_ids(lm, plan.state.examples)
        stored = run.config.get("resolved_controls")  # a resume: as its first rows had
        if self.params.controls is None and isinstance(stored, int) \
                and stored != plan.state.per_example:
            return Ready(plan.state.with_controls(stored), lm)
        return Ready(plan.state, lm)

    def batches(self, ready: Ready, items: Sequence[Item],
                policy: BatchPolicy) -> list[list[Item]]:
        """The token slots each item keeps in flight, as its group counts them (:func:`_group`:
        CID's two streams, or another mechanism's streams, each its prompt plus the new tokens,
        the generation's KV cache)."""
        costs = [_group(setting).slots(ready.lm, ex, setting, self.options,
                                       ready.examples.datastore) for setting, ex in items]
        return list(batches_by_cost(items, costs, policy))

    def measure(self, lm: LanguageModel, ready: Ready,
                items: Sequence[Item]) -> list[dict[str, Any]]:
        """CID responses and influence of the items, measured together (one batched KV cache for
        generation, one planner for n-gram scoring); each item samples from its own seed,
        (run seed, example index), the same across settings and batches."""
        with shared_prefixes():  # a sweep's settings score each prompt once
            start = time.perf_counter()
            index = ready.examples.index
            jobs = [Job(ex, setting, derive_seed(self.common.seed, index[ex.id]))
                    for setting, ex in items]
            controls = [_control(ready.examples, ex) for _, ex in items] \
                if self.options.control else None
            decoys = [ready.examples.decoys[index[ex.id]] for _, ex in items] \
                if ready.examples.decoys else None
            # one pipeline call per group in the batch (:func:`_group`), records in order
            records: list[dict[str, Any]] = [{} for _ in items]
            for group in dict.fromkeys(_group(s) for s, _ in items):
                where = [i for i, (s, _) in enumerate(items) if _group(s) == group]
                got = group.measure(
                    lm, [jobs[i] for i in where], self.options,
                    controls=None if controls is None else [controls[i] for i in where],
                    cost=ready.cost, decoys=None if decoys is None else [decoys[i] for i in where],
                    datastore=ready.examples.datastore)
                for i, record in zip(where, got):
                    records[i] = record
            ready.cost.measure_seconds += time.perf_counter() - start
            return records

    def requires(self) -> dict[str, str]:
        bounded = [s.bounded_eps for s in self.grid if s.bounded_eps is not None]
        return influence_needs([s.lam for s in self.grid], [s.temperature for s in self.grid],
                               bounded[0] if bounded else None)

    def summarize(self, ready: Ready, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        by_id = {ex.id: ex for ex in ready.examples.examples}
        bertscore_model, factkb_model = self.params.bertscore_model, self.params.factkb_model
        summaries = []
        for setting in self.grid:
            # rows read from samples.jsonl as they are needed (StoredRows), never all at once
            rows = select_rows(records, partial(_in_setting, setting.key))
            if rows:
                cost = ready.cost.to_dict() if ready.cost.examples else None
                summary = summarize_setting(rows, seed=self.common.seed, control_cost=cost,
                                            class_field=self.params.class_field)
                if setting.added:  # λ = 1 without a bound, measured though not asked for
                    summary["added_baseline"] = True
                summary.update(claim_summary(rows, seed=self.common.seed))
                if summary.get("mechanism"):  # scored as plain decoding: not its own loss
                    summary["dp_reading"] = mechanism_reading(summary)
                examples_of = [by_id[i] for i in Column(rows, "id")]
                references: list[Any] = [ex.reference for ex in examples_of]
                summary["quality"] = quality_scores(
                    Column(rows, "response"), references,
                    [ex.context for ex in examples_of], bertscore_model, factkb_model)
                if any(r.get("passages") for r in rows):  # the ledger per document
                    summary.update(documents_summary(
                        rows, {str(ex.id): ex.query for ex in examples_of},
                        (summary.get("control") or {}).get("flagged") or (),
                        self.params.exposure_budget, self.params.budgets(),
                        (summary.get("document_control") or {}).get("threshold")))
                summaries.append(summary)
        out = {"verdict": run_verdict(summaries), "settings": summaries}
        out.update(log_summary(ready.lm, ready.examples.examples, ready.examples.traces,
                               [s.temperature for s in self.grid]))
        # a greedy deployment's sweep draws its answers greedily (scored at T = 1)
        audited = [0.0] if self.params.deploys_greedily() else \
            sorted({s.temperature for s in self.grid})
        note = decoding_note(audited,
                             self.params.deployed_temperature, bool(self.common.server_url))
        if note:  # the audit's decoding is not the deployment's
            out["decoding_note"] = note
        if len(summaries) > 1:  # a sweep: which setting keeps utility at least privacy loss
            out["frontier"] = frontier(summaries, without_fields(records, HEAVY_FIELDS),
                                       seed=self.common.seed)
        return out

    def provenance(self, lm: LanguageModel, ready: Ready) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_templates": {
            ex.task: template_for(ex, self.options.template) for ex in ready.examples.examples}}
        apps = app_templates(lm, ready.examples.examples)
        if apps:  # the app's prompts as scored: through the model's chat template, with slots
            out["app_prompt_templates"] = apps
        return out


class Group(NamedTuple):
    """Settings measured in one pipeline call, one mechanism answering them: ``key`` tells the
    groups apart, ``measure`` (one function per group) measures their jobs, ``slots`` counts
    the token slots one of their items keeps in flight."""

    key: Any
    measure: Callable[..., list[dict[str, Any]]]
    slots: Callable[..., int]


def _group(setting: Setting) -> Group:
    """CID's settings by bounded ε, every λ together (:func:`.mechanism_mode.measure_cid`);
    another mechanism's by itself (:func:`.mechanism_mode.measure_mechanism`)."""
    if setting.decoded_by_cid:
        return Group(setting.bounded_eps, measure_cid, cid_slots)
    return Group(setting.mechanism, measure_mechanism, mechanism_slots)


def _in_setting(key: str, record: dict[str, Any]) -> bool:
    return bool(record["setting"] == key)


def _control(examples: Examples, ex: InfluenceExample) -> list[InfluenceExample]:
    """The control examples of ``ex``: the nearest other documents' contexts (and passages)
    with ``ex``'s query and task (:func:`~ctxleak.methods.influence.control.control_sets`);
    empty when no example's context is another document."""
    return [replace(ex, context=other.context, passages=other.passages, reference=None,
                    references=(), id=other.id, documents=other.documents)
            for other in examples.controls[examples.index[ex.id]]]
