"""Context pools and Monte Carlo context samples for susceptibility (Efficiently Computing
Susceptibility to Context in Language Models §5.1, Du et al. 2024).

Contexts (Du et al. §3.2; paper §5.1): the relation's context template filled with an entity and a
candidate answer. By default (``scope="mix"``, §5.1) a query's sample holds
``entity_contexts`` draws (8 of 256; 4 of 128 for LLaMA) from the contexts that mention the
queried entity and the rest from the relation's contexts about its other entities
(:func:`sample_context_mix`). The other scopes draw every context uniformly from one pool: the
query's own entity with every candidate answer (``"query"``, ctxleak's default before the mix),
every entity of the relation (``"relation"``, as Du et al. sample them), or every entity of every
relation (``"all"``). :func:`sample_contexts` draws from a pool and deduplicates: each distinct
context is scored once and weighted by how often it was drawn (the empirical distribution p̂).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ctxleak.errors import ConfigError
from ctxleak.methods.susceptibility.data import Query, Relation, unique

CONTEXT_SCOPES = ("mix", "query", "relation", "all")


@dataclass(frozen=True)
class ContextSample:
    """Distinct contexts with the number of times each was drawn: ``p̂(c) = counts / total``."""

    texts: list[str]
    counts: np.ndarray = field(repr=False)

    @property
    def weights(self) -> np.ndarray:
        return cast("np.ndarray", self.counts / self.counts.sum())

    @property
    def n_draws(self) -> int:
        return int(self.counts.sum())


# ---------------------------------------------------------------------------------------------
# queries and contexts


def context_pool(relation: Relation, entities: Sequence[str]) -> list[str]:
    """Every context template filled with every given entity and every candidate answer,
    without repeats, in a fixed order."""
    return unique(t.format(entity=e, answer=a) for e in entities for a in relation.answers
                   for t in relation.context_templates)


def pool_entities(query: Query, relations: Sequence[Relation], scope: str) -> list[str]:
    """The entities whose contexts may be drawn for ``query`` (its own entity first)."""
    return scope_entities(query.relation, query.entity, relations, scope)


def scope_entities(relation_name: str, entity: str, relations: Sequence[Relation],
                   scope: str) -> list[str]:
    """:func:`pool_entities` of a query about ``entity`` under ``relation_name``."""
    if scope not in CONTEXT_SCOPES:
        raise ConfigError(f"context_entities must be one of {', '.join(CONTEXT_SCOPES)}, "
                          f"not '{scope}'", param="context_entities")
    if scope == "mix":
        raise ConfigError("the 'mix' scope has two pools: use other_entities and "
                          "sample_context_mix")
    if scope == "query":
        return [entity]
    chosen = [r for r in relations if scope == "all" or r.name == relation_name]
    names = [entity]
    for r in chosen:
        names += [e for e, _ in r.entities] + list(r.fake_entities)
    return unique(names)


def other_entities(query: Query, relation: Relation) -> list[str]:
    """The relation's real and made-up entities other than the query's (§5.1: the
    contexts of a query's sample that do not mention its entity)."""
    return _others(query.entity, relation)


def _others(entity: str, relation: Relation) -> list[str]:
    names = [e for e, _ in relation.entities] + list(relation.fake_entities)
    return [e for e in unique(names) if e != entity]


def _draw(pool: Sequence[str], n: int, rng: np.random.Generator, replace: bool) -> list[str]:
    if replace:
        idx = rng.integers(0, len(pool), size=n)
    else:
        idx = rng.permutation(len(pool))[:min(n, len(pool))]
    return [pool[i] for i in idx]


def sample_contexts(pool: Sequence[str], n: int, rng: np.random.Generator, *,
                    replace: bool = False) -> ContextSample:
    """Draw ``n`` contexts uniformly from ``pool`` (without replacement, the default: the paper
    §5.1 and Du et al. subsample their contexts, capped at the pool size; with: i.i.d. Monte
    Carlo draws) and deduplicate, keeping each distinct context once with its count, in order
    of first draw."""
    if n < 1:
        raise ConfigError(f"contexts must be at least 1, got {n}", param="contexts")
    if not pool:
        raise ConfigError("the context pool is empty")
    return dedupe_contexts(_draw(pool, n, rng, replace))


def sample_context_mix(entity_pool: Sequence[str], other_pool: Sequence[str], n: int,
                       entity_contexts: int, rng: np.random.Generator, *,
                       replace: bool = False) -> ContextSample:
    """The context mix of "Efficiently Computing Susceptibility to Context in Language Models"
    (§5.1): ``n`` contexts per query, ``entity_contexts`` of them drawn from the
    contexts that mention the queried entity (``entity_pool``) and ``n − entity_contexts`` from
    the relation's contexts about other entities (``other_pool``); each part drawn as in
    :func:`sample_contexts`, then the whole sample deduplicated (p̂ = count / draws)."""
    check_context_mix(n, entity_contexts)
    if entity_contexts and not entity_pool:
        raise ConfigError("no context mentions the queried entity")
    if entity_contexts < n and not other_pool:
        raise ConfigError("the relation has no other entity to draw the other "
                          f"{n - entity_contexts} contexts from: use entity_contexts={n} or "
                          "context_entities='query'", param="entity_contexts",
                          also=("context_entities",))
    drawn = _draw(entity_pool, entity_contexts, rng, replace) if entity_contexts else []
    if entity_contexts < n:
        drawn += _draw(other_pool, n - entity_contexts, rng, replace)
    return dedupe_contexts(drawn)


def check_context_mix(n: int, entity_contexts: int) -> None:
    """``1 <= n`` and ``0 <= entity_contexts <= n`` (keywords ``contexts``, ``entity_contexts``)."""
    if n < 1:
        raise ConfigError(f"contexts must be at least 1, got {n}", param="contexts")
    if not 0 <= entity_contexts <= n:
        raise ConfigError(f"entity_contexts={entity_contexts} must be between 0 and "
                          f"contexts={n}; Efficiently Computing Susceptibility to Context in "
                          "Language Models (§5.1) uses 8 of 256 (4 of 128)",
                          param="entity_contexts", also=("contexts",))


def dedupe_contexts(drawn: Sequence[str]) -> ContextSample:
    """Distinct contexts of a list of draws, each with its count (p̂ = count / draws)."""
    counts = Counter(drawn)  # in order of first draw
    return ContextSample(texts=list(counts), counts=np.array(list(counts.values()),
                                                              dtype=np.float64))


@dataclass(frozen=True)
class QueryContexts:
    """One query's Monte Carlo contexts: the ``sample`` (distinct texts and counts), the
    ``pool`` it was drawn from and the contexts of that pool that mention the query's entity."""

    sample: ContextSample
    pool: list[str]
    entity_pool: list[str]

    @property
    def pool_indices(self) -> list[int]:
        """Where each distinct context of the sample sits in ``pool`` (first occurrence)."""
        where: dict[str, int] = {}
        for i, text in enumerate(self.pool):
            where.setdefault(text, i)
        return [where[t] for t in self.sample.texts]


def query_pools(relation_name: str, entity: str, relations: Sequence[Relation], *,
                scope: str = "mix") -> tuple[list[str], list[str]]:
    """``(pool, entity_pool)`` of a query about ``entity`` under ``relation_name``: every
    context its Monte Carlo sample may draw, in a fixed order (with ``scope="mix"``: the
    contexts that mention the entity, then the relation's contexts about its other entities),
    and those that mention the entity. A ``samples.jsonl`` record's ``context_draws`` indexes
    ``pool``."""
    relation = next((r for r in relations if r.name == relation_name), None)
    if relation is None:
        raise ConfigError(f"no relation named '{relation_name}'", param="relations")
    entity_pool = context_pool(relation, [entity])
    if scope == "mix":
        return entity_pool + context_pool(relation, _others(entity, relation)), entity_pool
    return context_pool(relation, scope_entities(relation_name, entity, relations, scope)), \
        entity_pool


def query_contexts(query: Query, relations: Sequence[Relation], n: int, rng: np.random.Generator,
                   *, scope: str = "mix", entity_contexts: int = 8,
                   replace: bool = False) -> QueryContexts:
    """The contexts ``ctxleak susceptibility`` scores for ``query`` (§5.1): with
    ``scope="mix"``, ``entity_contexts`` of the ``n`` draws from the contexts that mention the
    queried entity and the rest from the relation's other entities
    (:func:`sample_context_mix`); any other scope draws all ``n`` from one pool
    (:func:`pool_entities`, :func:`sample_contexts`). Without replacement by default, as paper
    002 §5.1 and Du et al. subsample their contexts (each part capped at its pool's size)."""
    pool, entity_pool = query_pools(query.relation, query.entity, relations, scope=scope)
    if scope == "mix":
        others = pool[len(entity_pool):]
        sample = sample_context_mix(entity_pool, others, n, entity_contexts, rng, replace=replace)
    else:
        sample = sample_contexts(pool, n, rng, replace=replace)
    return QueryContexts(sample, pool, entity_pool)


def recorded_contexts(record: dict[str, Any], relations: Sequence[Relation], *,
                      scope: str = "mix") -> ContextSample:
    """The Monte Carlo sample a ``samples.jsonl`` record was measured on, from its
    ``context_draws`` (pool index and count of each distinct context, in the order scored) and
    the pool :func:`query_pools` rebuilds from the relations: χ_MC is then
    ``monte_carlo_susceptibility(lm, record["query"], sample.texts, sample.counts).chi``."""
    pool, _ = query_pools(record["relation"], record["entity"], relations, scope=scope)
    draws = record["context_draws"]
    if any(not 0 <= i < len(pool) for i in draws["pool_index"]):
        raise ConfigError(f"context_draws of query {record.get('query')!r} index past the "
                          f"{len(pool)} contexts of its pool: other relations than the run's?",
                          param="relations")
    return ContextSample(texts=[pool[i] for i in draws["pool_index"]],
                         counts=np.asarray(draws["count"], dtype=np.float64))
