"""Susceptibility to context: Monte Carlo (Du et al. 2024) and Fisher (Efficiently Computing
Susceptibility to Context in Language Models)."""

from ctxleak.methods.susceptibility.contexts import (
    CONTEXT_SCOPES,
    ContextSample,
    QueryContexts,
    context_pool,
    dedupe_contexts,
    other_entities,
    pool_entities,
    query_contexts,
    query_pools,
    recorded_contexts,
    sample_context_mix,
    sample_contexts,
)
from ctxleak.methods.susceptibility.data import (
    QUERY_TYPES,
    Query,
    Relation,
    build_queries,
    load_relations,
    parse_query_types,
)
from ctxleak.methods.susceptibility.fisher import (
    FisherResult,
    fisher_susceptibility,
    fisher_trace,
    full_vocab_trace,
)
from ctxleak.methods.susceptibility.montecarlo import (
    MCResult,
    kl_rows,
    marginal_logprobs,
    monte_carlo_susceptibility,
    susceptibility_from_logprobs,
)
from ctxleak.methods.susceptibility.pipeline import (
    SusceptibilityOptions,
    correlation,
    group_means,
    measure_query,
    summarize_queries,
)

__all__ = [
    "CONTEXT_SCOPES",
    "QUERY_TYPES",
    "ContextSample",
    "FisherResult",
    "MCResult",
    "Query",
    "Relation",
    "SusceptibilityOptions",
    "build_queries",
    "QueryContexts",
    "query_contexts",
    "query_pools",
    "recorded_contexts",
    "context_pool",
    "correlation",
    "dedupe_contexts",
    "fisher_susceptibility",
    "fisher_trace",
    "group_means",
    "full_vocab_trace",
    "kl_rows",
    "load_relations",
    "marginal_logprobs",
    "measure_query",
    "monte_carlo_susceptibility",
    "other_entities",
    "parse_query_types",
    "pool_entities",
    "sample_context_mix",
    "sample_contexts",
    "summarize_queries",
    "susceptibility_from_logprobs",
]
