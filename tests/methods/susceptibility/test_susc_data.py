"""Relation files (ctxleak and Du et al. YAGO formats), queries, context pools and bad input
(SPEC §9: clear errors that name the file and field, before any model is loaded)."""

from __future__ import annotations

import pytest
from helpers.tiny_data import CAPITAL_RELATION as RELATION
from helpers.tiny_data import write_json as _write

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.susceptibility.contexts import (
    context_pool,
    other_entities,
    pool_entities,
    sample_context_mix,
)
from ctxleak.methods.susceptibility.data import (
    build_queries,
    load_relations,
    parse_query_types,
)
from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions


def test_demo_set_loads():
    rels = load_relations("demo")
    assert len(rels) == 10 and len({r.name for r in rels}) == 10
    queries = build_queries(rels, ["closed", "open_qa", "open_completion"])
    n_entities = sum(len(r.entities) + len(r.fake_entities) for r in rels)
    assert len(queries) == 3 * n_entities
    assert len({q.id for q in queries}) == len(queries)
    assert [q.index for q in queries] == list(range(len(queries)))
    first = queries[:6]  # real and made-up entities interleaved, all three forms each
    assert [q.is_real for q in first] == [True] * 3 + [False] * 3
    closed = next(q for q in queries if q.query_type == "closed" and q.is_real)
    assert closed.answer in closed.text and "{" not in closed.text


def test_queries_and_pools(tmp_path):
    (rel,) = load_relations(_write(tmp_path, {"relations": [RELATION]}))
    queries = build_queries([rel], ["closed", "open_completion"])
    assert [q.id for q in queries] == [
        "capital/real/France/closed", "capital/real/France/open_completion",
        "capital/fake/Velmoria/closed", "capital/fake/Velmoria/open_completion",
        "capital/real/Japan/closed", "capital/real/Japan/open_completion"]
    assert queries[0].text == "Q: Is Paris the capital of France? A:"
    fake_closed = queries[2].text
    assert fake_closed in {f"Q: Is {a} the capital of Velmoria? A:" for a in rel.answers}
    assert build_queries([rel], ["closed"])[1].text == fake_closed  # deterministic
    q = queries[1]
    own = context_pool(rel, pool_entities(q, [rel], "query"))
    assert own == [f"The capital of France is {a}.\n" for a in rel.answers]
    everyone = context_pool(rel, pool_entities(q, [rel], "relation"))
    assert len(everyone) == 3 * 3 and everyone[:3] == own
    with pytest.raises(ConfigError):
        pool_entities(q, [rel], "planet")


def test_entities_per_relation_subsamples(tmp_path):
    rel = dict(RELATION, entities=[{"entity": f"E{i}", "answer": "Paris"} for i in range(10)],
               fake_entities=[f"F{i}" for i in range(10)])
    (r,) = load_relations(_write(tmp_path, {"relations": [rel]}))
    qs = build_queries([r], ["open_completion"], entities_per_relation=3, seed=1)
    assert sum(q.is_real for q in qs) == 3 and sum(not q.is_real for q in qs) == 3
    assert [q.id for q in qs] == [q.id for q in build_queries([r], ["open_completion"], 3, 1)]


def test_du_et_al_yago_format(tmp_path):
    yago = {
        "http://schema.org/founder": {
            "query_forms": {
                "closed": ["Q: Is {answer} a founder of '{entity}'?\nA:",
                           "Q: Was '{entity}' founded by {answer}?\nA:"],
                "open": ["Q: Who founded '{entity}'?\nA:", "'{entity}' was founded by"],
            },
            "entities": ["Acme", "Globex", "Acme"],
            "answers": ["Ann Smith", "Bo Chen", "Cy Doe"],
            "entity_uris": ["u1", "u2", "u1"],
            "context_templates": ["'{entity}' was founded by {answer}.\n"],
            "fake_entities": ["Zorblat Inc"],
            "gpt_fake_entities": ["Quillon Ltd", "Marrowby"],
        }
    }
    (rel,) = load_relations(_write(tmp_path, yago, "yago_qec.json"))
    assert rel.name == "http://schema.org/founder"
    assert len(rel.queries["closed"]) == 2
    assert rel.queries["open_qa"] == ["Q: Who founded '{entity}'?\nA:"]
    assert rel.queries["open_completion"] == ["'{entity}' was founded by"]
    assert rel.entities == [("Acme", "Ann Smith"), ("Globex", "Bo Chen")]  # first answer kept
    assert rel.fake_entities == ["Quillon Ltd", "Marrowby"]  # GPT-4 names preferred
    assert rel.answers == ["Ann Smith", "Bo Chen"]
    ids = [q.id for q in build_queries([rel], ["closed"])]
    assert "http://schema.org/founder/real/Acme/closed#2" in ids


def test_malformed_json_names_the_file_and_line(tmp_path):
    path = _write(tmp_path, '{"relations": [\n  {"name": "x",,}\n]}')
    with pytest.raises(InputError) as err:
        load_relations(path)
    assert str(path) in str(err.value) and ":2" in str(err.value)
    assert "not valid JSON" in str(err.value)


def test_missing_template_field_is_named(tmp_path):
    bad = {k: v for k, v in RELATION.items() if k != "context_template"}
    path = _write(tmp_path, {"relations": [RELATION | {"name": "ok"}, bad]})
    with pytest.raises(InputError) as err:
        load_relations(path)
    msg = str(err.value)
    assert str(path) in msg and "relations[1] (capital).context_template" in msg
    assert "missing field" in msg


@pytest.mark.parametrize("field,value,needle", [
    ("context_template", "The capital of {entity} is.", "needs {answer}"),
    ("open_qa_query", "What is the capital of {country}?", "unknown placeholder"),
    ("closed_query", "Q: Is it the capital of {entity}? A:", "needs {answer}"),
    ("answers", [], "is empty"),
    ("entities", [{"entity": "France"}], "entities[0].answer"),
])
def test_bad_templates_and_lists(tmp_path, field, value, needle):
    path = _write(tmp_path, {"relations": [RELATION | {field: value}]})
    with pytest.raises(InputError) as err:
        load_relations(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="unknown format"):
        load_relations(_write(tmp_path, [1, 2]))
    with pytest.raises(InputError, match="file not found"):
        load_relations(tmp_path / "nope.json")


def test_query_types_and_options():
    assert parse_query_types("closed,open") == ["closed", "open_qa", "open_completion"]
    assert parse_query_types("open_qa") == ["open_qa"]
    with pytest.raises(ConfigError, match="unknown query type 'opne'"):
        parse_query_types("closed,opne")
    with pytest.raises(ConfigError, match="^contexts must"):
        SusceptibilityOptions(n_contexts=0).validate()
    # paper 002 §5.1 is the default: 256 contexts per query, 8 about the queried entity; fewer
    # contexts keep the paper's ratio (4 of 128, as for LLaMA), at least 1
    default = SusceptibilityOptions().validate()
    assert (default.context_entities, default.n_contexts, default.entity_contexts) == \
        ("mix", 256, 8)
    assert SusceptibilityOptions(n_contexts=128).validate().entity_contexts == 4
    assert SusceptibilityOptions(n_contexts=6).validate().entity_contexts == 1
    assert SusceptibilityOptions(n_contexts=6).entity_draws == 1
    with pytest.raises(ConfigError, match=r"entity_contexts=8 must be between 0 and "
                       r"contexts=6"):
        SusceptibilityOptions(n_contexts=6, entity_contexts=8).validate()
    query = SusceptibilityOptions(n_contexts=6, context_entities="query").validate()
    assert query.entity_contexts is None
    with pytest.raises(ConfigError, match="^reference must"):
        SusceptibilityOptions(reference="prior").validate()
    with pytest.raises(ConfigError, match="^sigma2 must"):
        SusceptibilityOptions(sigma2=-1.0).validate()


@pytest.mark.parametrize("replace", [True, False])
def test_context_mix_of_paper_002(tmp_path, replace):
    """Paper 002 §5.1: of n contexts per query, k mention the queried entity and n − k are the
    relation's contexts about its other (real and made-up) entities."""
    import numpy as np

    (rel,) = load_relations(_write(tmp_path, {"relations": [RELATION]}))
    q = build_queries([rel], ["open_completion"])[0]
    assert q.entity == "France" and other_entities(q, rel) == ["Japan", "Velmoria"]
    own = context_pool(rel, [q.entity])
    others = context_pool(rel, other_entities(q, rel))
    assert not set(own) & set(others) and all("France" not in c for c in others)
    sample = sample_context_mix(own, others, 5, 2, np.random.default_rng(0), replace=replace)
    counts = dict(zip(sample.texts, sample.counts))
    assert sample.n_draws == 5
    assert sum(c for t, c in counts.items() if t in own) == 2
    assert sum(c for t, c in counts.items() if t in others) == 3
    if not replace:
        assert all(c == 1 for c in counts.values())
    assert sample.weights.sum() == pytest.approx(1.0)
    only_entity = sample_context_mix(own, others, 3, 3, np.random.default_rng(1))
    assert set(only_entity.texts) <= set(own) and only_entity.n_draws == 3
    with pytest.raises(ConfigError, match="no other entity"):
        sample_context_mix(own, [], 4, 1, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="mix"):
        pool_entities(q, [rel], "mix")


def test_query_contexts_is_the_methods_sample(llama_lm):
    """``query_contexts`` (what the benchmark uses) draws the method's sample: under the
    paper's mix, exactly ``entity_contexts`` of the ``n`` draws mention the queried entity and
    the rest come from the relation's other entities; the same seed gives the same sample as
    :func:`measure_queries` records (pool size, distinct contexts)."""
    import numpy as np

    from ctxleak.methods.susceptibility.contexts import query_contexts
    from ctxleak.methods.susceptibility.pipeline import measure_queries

    rels = load_relations("demo")
    q = build_queries(rels, ["closed"])[0]
    relation = next(r for r in rels if r.name == q.relation)
    drawn = query_contexts(q, rels, 64, np.random.default_rng(5), entity_contexts=3)
    own = set(context_pool(relation, [q.entity]))
    assert set(drawn.entity_pool) == own and set(drawn.sample.texts) <= set(drawn.pool)
    counts = dict(zip(drawn.sample.texts, drawn.sample.counts))
    assert drawn.sample.n_draws == 64
    assert sum(c for t, c in counts.items() if t in own) == 3
    assert set(drawn.pool) - own == set(context_pool(relation, other_entities(q, relation)))
    only = query_contexts(q, rels, 16, np.random.default_rng(5), scope="query", replace=True)
    assert set(only.sample.texts) <= own and only.sample.n_draws == 16
    capped = query_contexts(q, rels, len(own) + 5, np.random.default_rng(5), scope="query")
    assert sorted(capped.sample.texts) == sorted(own)  # without replacement: each once

    options = SusceptibilityOptions(method="mc", n_contexts=64, entity_contexts=3).validate()
    (record,) = measure_queries(llama_lm, [(q, 5)], rels, options)
    assert (record["n_draws"], record["n_entity_draws"], record["n_distinct_contexts"],
            record["context_pool_size"]) == (64, 3, len(drawn.sample.texts), len(drawn.pool))
    assert {c["context"] for c in record["persuasive_contexts"]} <= set(drawn.sample.texts)
