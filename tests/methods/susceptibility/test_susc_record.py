"""The Monte Carlo sample of each query is auditable from its ``samples.jsonl`` record, and it is
drawn without replacement by default (paper 002 §5.1, Du et al. 2024)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxleak.errors import ConfigError
from ctxleak.methods.susceptibility import (
    build_queries,
    load_relations,
    monte_carlo_susceptibility,
    query_contexts,
    query_pools,
    recorded_contexts,
)
from ctxleak.methods.susceptibility.method import SusceptibilityMethod
from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions, measure_queries


@pytest.mark.parametrize(("scope", "sampling"), [("mix", "no-replacement"),
                                                 ("mix", "replacement"),
                                                 ("relation", "replacement")])
def test_chi_mc_recomputed_from_the_record_alone(llama_lm, scope, sampling):
    """From a record (through JSON, as samples.jsonl stores it) and the relations, the pool
    indices and counts give back the contexts scored and χ_MC to rounding."""
    rels = load_relations("demo")
    queries = build_queries(rels, ["closed", "open_qa"])[:3]
    options = SusceptibilityOptions(method="mc", n_contexts=24, context_entities=scope,
                                    sampling=sampling).validate()
    records = measure_queries(llama_lm, [(q, 11 + q.index) for q in queries], rels, options)
    for q, rec in zip(queries, records):
        rec = json.loads(json.dumps(rec))
        sample = recorded_contexts(rec, rels, scope=scope)
        assert int(sample.counts.sum()) == rec["n_draws"]
        assert len(sample.texts) == rec["n_distinct_contexts"]
        assert len(query_pools(q.relation, q.entity, rels, scope=scope)[0]) == \
            rec["context_pool_size"]
        again = monte_carlo_susceptibility(llama_lm, rec["query"], sample.texts, sample.counts)
        assert again.chi == pytest.approx(rec["chi_mc"], rel=1e-9, abs=1e-12)
        # the same contexts as a fresh draw with the record's seed
        drawn = query_contexts(q, rels, 24, np.random.default_rng(rec["seed"]), scope=scope,
                               entity_contexts=options.entity_draws,
                               replace=sampling == "replacement")
        assert sample.texts == drawn.sample.texts
        assert sample.counts.tolist() == drawn.sample.counts.tolist()
    if sampling == "replacement":  # repeats are recorded as counts
        assert any(max(r["context_draws"]["count"]) > 1 for r in records)


def test_recorded_contexts_refuses_an_index_past_the_pool():
    rels = load_relations("demo")
    q = build_queries(rels, ["closed"])[0]
    pool, _ = query_pools(q.relation, q.entity, rels)
    record = {"relation": q.relation, "entity": q.entity, "query": q.text,
              "context_draws": {"pool_index": [len(pool)], "count": [1]}}
    with pytest.raises(ConfigError, match="index past") as err:
        recorded_contexts(record, rels)
    assert err.value.param == "relations"


def test_sampling_without_replacement_is_the_default():
    """Paper 002 §5.1 and Du et al. subsample contexts: every distinct context drawn once."""
    assert SusceptibilityOptions().sampling == "no-replacement"
    assert SusceptibilityMethod().options.sampling == "no-replacement"
    rels = load_relations("demo")
    q = build_queries(rels, ["open_qa"])[0]
    drawn = query_contexts(q, rels, 64, np.random.default_rng(0))
    assert drawn.sample.n_draws == 64 and set(drawn.sample.counts.tolist()) == {1.0}
    assert len(drawn.pool_indices) == len(set(drawn.pool_indices)) == 64
    with_repeats = query_contexts(q, rels, 64, np.random.default_rng(0), replace=True)
    assert max(with_repeats.sample.counts) > 1
