"""The susceptibility Method (paper 002, Du et al. 2024): one record per query with χ_MC and/or
χ_F; summarised with their correlation overall and by query type, group means and timing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions


class SusceptibilityMethod(Method):
    """Susceptibility of queries to context (``ctxleak susceptibility``). Keywords are the CLI's
    flags: ``method`` (mc, fisher, both), ``contexts``, ``entity_contexts``, ``top_k``,
    ``sigma2``, ``reference``, ``query_types``, ``fisher_vocab``, ``fisher_truncation``,
    ``context_entities``,
    ``sampling``, ``relations``, ``entities_per_relation``."""

    name = "susceptibility"
    desc = "susceptibility"

    def __init__(self, common: RunOptions | None = None, *, method: str = "both",
                 contexts: int = 256, entity_contexts: int | None = None, top_k: int = 10,
                 sigma2: float = 1.0,
                 reference: str = "marginal",
                 query_types: Any = "closed,open_qa,open_completion",
                 fisher_vocab: str = "topk", fisher_truncation: str = "renormalised",
                 context_entities: str = "mix",
                 sampling: str = "no-replacement", relations: Any = None,
                 entities_per_relation: int | None = None) -> None:
        from ctxleak.methods.susceptibility.data import parse_query_types
        from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions
        from ctxleak.results import SusceptibilityResult

        super().__init__(common)
        self.result_class = SusceptibilityResult  # type: ignore[misc]  # set here to dodge an import loop
        self.options = SusceptibilityOptions(
            method=method, n_contexts=contexts, top_k=top_k, sigma2=sigma2,
            reference=reference, fisher_vocab=fisher_vocab, fisher_truncation=fisher_truncation,
            context_entities=context_entities,
            entity_contexts=entity_contexts, sampling=sampling).validate()
        if not isinstance(query_types, str):
            query_types = ",".join(query_types)
        self.types = parse_query_types(query_types)
        if entities_per_relation is not None and entities_per_relation < 1:
            raise ConfigError(f"entities_per_relation must be at least 1, got "
                              f"{entities_per_relation}", param="entities_per_relation")
        if relations is not None and not isinstance(relations, str):
            relations = ",".join(relations)
        self.relations, self.entities_per_relation = relations, entities_per_relation

    def items(self, data: Any) -> list[Any]:
        from ctxleak.methods.susceptibility.data import (
            build_queries,
            load_relations,
            resolve_data_path,
        )

        self.data = data
        rels = load_relations(data)
        if self.relations is not None:
            wanted = [r.strip() for r in self.relations.split(",") if r.strip()]
            if not wanted:
                raise ConfigError("relations needs at least one relation name",
                                  param="relations")
            unknown = [w for w in wanted if w not in {r.name for r in rels}]
            if unknown:
                raise ConfigError(f"relations: unknown relation(s) {', '.join(unknown)}; the "
                                  f"file has {', '.join(r.name for r in rels)}",
                                  param="relations")
            rels = [r for r in rels if r.name in wanted]
        queries = build_queries(rels, self.types, self.entities_per_relation,
                                seed=self.common.seed)
        if not queries:
            raise ConfigError(f"no queries of type {', '.join(self.types)} in "
                              f"{resolve_data_path(data)}")
        if self.common.limit is not None:
            queries = queries[:self.common.limit]
        self.rels = rels
        return queries

    def inputs(self) -> dict[str, Any]:
        from ctxleak.methods.susceptibility.data import resolve_data_path

        return {"data": resolve_data_path(self.data)}

    def key(self, item: Any) -> str:
        return str(item.id)

    def config(self) -> dict[str, Any]:
        from ctxleak.run.inputs import describe

        settings = self.options.to_dict()
        settings["contexts"] = settings.pop("n_contexts")  # stored under the flag's name
        return {"data": describe(self.data), "query_types": self.types,
                "relations": self.relations,
                "entities_per_relation": self.entities_per_relation, **settings}

    def setup(self, lm: Any, run: Any) -> None:
        from ctxleak.engine.forward import PrefixKV

        self.prefix_kv = PrefixKV(lm)  # the tokens before each query, once per run

    def batch_cost(self, item: Any) -> int | None:
        """The query's prompts in flight: its Monte Carlo contexts (about 32 tokens each with
        the query) or, Fisher alone, its one prompt."""
        per_prompt = 32 + len(item.text) // 3
        return per_prompt * (self.options.n_contexts if self.options.run_mc else 1)

    def measure(self, lm: Any, items: Sequence[Any]) -> list[dict[str, Any]]:
        """The queries measured together (Monte Carlo prompts in one planner run, Fisher in one
        batched forward and backward), each with its own seed (run seed, query index)."""
        from ctxleak.engine.generation import derive_seed
        from ctxleak.methods.susceptibility.pipeline import measure_queries

        return self.each_alone(items, lambda some, size: measure_queries(
            lm, [(q, derive_seed(self.common.seed, q.index)) for q in some], self.rels,
            self.options, size, self.prefix_kv))

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.susceptibility.pipeline import summarize_queries

        return summarize_queries(records, self.options)

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        return {"prompt_template": self.options.template}

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        from ctxleak.report.susceptibility import susceptibility_plots

        return dict(susceptibility_plots(result.records, self.options))

    def report(self, result: Any, lm: Any = None) -> Any:
        from ctxleak.report.susceptibility import susceptibility_report

        return susceptibility_report(result.records, result.summary, self.options,
                                     result.images,
                                     model=lm.info.name if lm else result.config.get("model"),
                                     data=result.config.get("data"))
