"""Susceptibility to context: Monte Carlo (Du et al. 2024) and Fisher (paper 002), SPEC §6."""

from ctxleak.methods.susceptibility.data import (
    CONTEXT_SCOPES,
    QUERY_TYPES,
    ContextSample,
    Query,
    Relation,
    build_queries,
    context_pool,
    dedupe_contexts,
    load_relations,
    parse_query_types,
    pool_entities,
    sample_contexts,
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
    build_report,
    correlation,
    make_plots,
    measure_query,
    summarize,
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
    "build_report",
    "context_pool",
    "correlation",
    "dedupe_contexts",
    "fisher_susceptibility",
    "fisher_trace",
    "full_vocab_trace",
    "kl_rows",
    "load_relations",
    "make_plots",
    "marginal_logprobs",
    "measure_query",
    "monte_carlo_susceptibility",
    "parse_query_types",
    "pool_entities",
    "sample_contexts",
    "summarize",
    "susceptibility_from_logprobs",
]
