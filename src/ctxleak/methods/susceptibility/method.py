"""The susceptibility Method (Efficiently Computing Susceptibility to Context in Language Models, Du
et al. 2024): one record per query with χ_MC and/or χ_F; summarised with their correlation overall
and by query type, group means and timing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.forward import PrefixKV
from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.needs import susceptibility as susceptibility_needs
from ctxleak.methods.susceptibility.data import (
    build_queries,
    load_relations,
    parse_query_types,
    resolve_data_path,
)
from ctxleak.methods.susceptibility.fisher import FISHER_NEEDS
from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions, measure_queries, summarize_queries
from ctxleak.methods.susceptibility.verdict import UNITS as VERDICT_UNITS
from ctxleak.methods.susceptibility.verdict import (
    ceiling_summary,
    susceptibility_verdict,
    top_queries,
)
from ctxleak.run.inputs import describe
from ctxleak.run.method import ItemIds, ParamsMethod, Plan, batches_by_cost
from ctxleak.run.params import option
from ctxleak.run.rundir import RunDir


@dataclass(frozen=True)
class SusceptibilityParams:
    """The parameters of ``ctxleak susceptibility`` ("Context versus Prior Knowledge in
    Language Models", §3-5), checked on construction; ``query_types`` becomes a tuple of
    query types and ``relations`` a comma list (both accept a list or a comma list)."""

    method: str = option("both", "mc (Monte Carlo), fisher (the Fisher approximation) or both.")
    contexts: int = option(256, "Sampled contexts per query (Monte Carlo).")
    entity_contexts: int | None = option(
        None, "How many of the contexts mention the queried entity (default: 1/32 of "
        "``contexts``, at least 1).")
    top_k: int = option(10, "Answer tokens kept in the Monte Carlo and Fisher sums.")
    sigma2: float = option(1.0, "Variance σ² of the Fisher approximation's Gaussian "
                           "embedding perturbation.")
    reference: str = option("marginal", "Reference distribution of χ_MC: marginal (the mutual "
                            "information) or no-context.")
    query_types: str | Sequence[str] = option(
        "closed,open_qa,open_completion", "Query forms: closed, open_qa, open_completion (or "
        "open for both open forms).")
    fisher_vocab: str = option("topk", "Fisher over the top-k answer tokens (topk) or the full "
                               "vocabulary (full).")
    fisher_truncation: str = option("renormalised", "Top-k Fisher renormalised over the k "
                                    "tokens or raw.")
    context_entities: str = option("mix", "Whose contexts are sampled: mix, query, relation or "
                                   "all.")
    sampling: str = option("no-replacement", "Context draws without (no-replacement) or with "
                           "replacement.")
    relations: str | Sequence[str] | None = option(None, "Only these relations (default: all "
                                                   "in the file).")
    entities_per_relation: int | None = option(None, "At most this many entities per relation.")

    def __post_init__(self) -> None:
        self.options()
        types = self.query_types
        if not isinstance(types, str):
            types = ",".join(types)
        object.__setattr__(self, "query_types", tuple(parse_query_types(types)))
        if self.entities_per_relation is not None and self.entities_per_relation < 1:
            raise ConfigError(f"entities_per_relation must be at least 1, got "
                              f"{self.entities_per_relation}", param="entities_per_relation")
        if self.relations is not None:
            if not isinstance(self.relations, str):
                object.__setattr__(self, "relations", ",".join(self.relations))
            if not self.relation_names:
                raise ConfigError("relations needs at least one relation name",
                                  param="relations")

    @property
    def relation_names(self) -> list[str] | None:
        """The relations asked for, or None for all."""
        if self.relations is None:
            return None
        return [r.strip() for r in str(self.relations).split(",") if r.strip()]

    def options(self) -> SusceptibilityOptions:
        """The checked pipeline settings (``entity_contexts`` resolved)."""
        return SusceptibilityOptions(
            method=self.method, n_contexts=self.contexts, top_k=self.top_k, sigma2=self.sigma2,
            reference=self.reference, fisher_vocab=self.fisher_vocab,
            fisher_truncation=self.fisher_truncation, context_entities=self.context_entities,
            entity_contexts=self.entity_contexts, sampling=self.sampling).validate()


@dataclass(frozen=True)
class Ready:
    """The relations the queries come from, and the store of the tokens before each query
    (Fisher's prefix, computed once per run; None without Fisher)."""

    relations: list[Any]
    prefix_kv: PrefixKV | None


class SusceptibilityMethod(ParamsMethod[Any, list[Any], Ready, SusceptibilityParams]):
    """Susceptibility of queries to context (``ctxleak susceptibility``). ``common``: the run
    options; ``params``: the method's own (:class:`SusceptibilityParams`)."""

    name = "susceptibility"
    desc = "susceptibility"
    params_type = SusceptibilityParams

    def derive(self) -> None:
        self.options = self.params.options()
        self.types = list(self.params.query_types)

    def plan(self, data: Any) -> Plan[Any, list[Any]]:
        """The queries, and as state the relations they come from. The chat template only when
        asked for (``chat_template="on"``): "Efficiently Computing Susceptibility to Context in
        Language Models" prompts a model with text that ends in the query, and wrapped in a chat
        turn χ_F stops tracking χ_MC on the default model (Spearman -0.04 with the template,
        +0.37 without, 60 demo queries: README)."""
        rels = load_relations(data)
        wanted = self.params.relation_names
        if wanted is not None:
            unknown = [w for w in wanted if w not in {r.name for r in rels}]
            if unknown:
                raise ConfigError(f"relations: unknown relation(s) {', '.join(unknown)}; the "
                                  f"file has {', '.join(r.name for r in rels)}",
                                  param="relations")
            rels = [r for r in rels if r.name in wanted]
        queries = build_queries(rels, self.types, self.params.entities_per_relation,
                                seed=self.common.seed)
        if not queries:
            raise ConfigError(f"no queries of type {', '.join(self.types)} in "
                              f"{resolve_data_path(data)}")
        if self.common.limit is not None:
            queries = queries[:self.common.limit]
        settings = self.options.to_dict()
        settings["contexts"] = settings.pop("n_contexts")  # stored under the flag's name
        config = {"data": describe(data), "query_types": self.types,
                  "relations": self.params.relations,
                  "entities_per_relation": self.params.entities_per_relation, **settings}
        return Plan(items=queries, config=config, state=rels,
                    inputs={"data": resolve_data_path(data)},
                    load_options={"chat_template": "on" if self.common.chat_template == "on"
                                  else "off"})

    def ids(self, item: Any) -> ItemIds:
        return ItemIds(str(item.id), str(item.id))

    def prepare(self, lm: LanguageModel, plan: Plan[Any, list[Any]], run: RunDir) -> Ready:
        # the tokens before each query, once per run (Fisher's gradients: in-process only)
        return Ready(plan.state, PrefixKV(lm.in_process(FISHER_NEEDS))
                     if self.options.run_fisher else None)

    def batches(self, ready: Ready, items: Sequence[Any],
                policy: BatchPolicy) -> list[list[Any]]:
        """The query's prompts in flight: its Monte Carlo contexts (about 32 tokens each with
        the query) or, Fisher alone, its one prompt."""
        per = self.options.n_contexts if self.options.run_mc else 1
        costs: list[int | None] = [(32 + len(item.text) // 3) * per for item in items]
        return list(batches_by_cost(items, costs, policy))

    def measure(self, lm: LanguageModel, ready: Ready,
                items: Sequence[Any]) -> list[dict[str, Any]]:
        """The queries measured together (Monte Carlo prompts in one planner run, Fisher in one
        batched forward and backward), each with its own seed (run seed, query index)."""
        return measure_queries(lm, [(q, derive_seed(self.common.seed, q.index)) for q in items],
                               ready.relations, self.options, ready.prefix_kv)

    def requires(self) -> dict[str, str]:
        return susceptibility_needs(self.params.method)

    def summarize(self, ready: Ready, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        summary = summarize_queries(records, self.options)
        marginal = self.options.reference == "marginal"
        if self.options.run_mc and marginal:
            summary["ceiling"] = ceiling_summary(records)
        key = self.options.mc_key if self.options.run_mc else "chi_f"
        summary["top_queries"] = top_queries(records, key, marginal=marginal)
        summary["units"] = dict(VERDICT_UNITS)
        summary["verdict"] = susceptibility_verdict(summary, records, self.options.reference)
        return summary

    def provenance(self, lm: LanguageModel, ready: Ready) -> dict[str, Any]:
        return {"prompt_template": self.options.template}
