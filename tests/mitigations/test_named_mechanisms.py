"""Mechanisms parsed by name (``dp-vote:eps=2,shards=4``): the grammar, the key read back, the
declared types, and one-line errors naming what is wrong; on a toy mechanism registered for the
test (:mod:`helpers.toy_mechanism`)."""

from __future__ import annotations

import pytest
from helpers.toy_mechanism import FirstDocuments, register_toy

from ctxleak.errors import ConfigError
from ctxleak.mitigations.named import (
    MECHANISMS,
    SUPPLIED,
    is_mechanism,
    parameters,
    parse_mechanism,
)
from ctxleak.sensitive import find_sensitive


@pytest.fixture(autouse=True)
def _toy():
    register_toy()


def test_the_grammar_its_key_and_a_mapping_give_the_same_mechanism():
    m = parse_mechanism("toy-first:eps=2,k=3")
    assert m == FirstDocuments(eps=2.0, k=3) and m.key() == "toy-first(eps=2,k=3)"
    assert parse_mechanism(m.key()) == m  # a stored key parses back
    assert parse_mechanism(" toy-first : eps = 2 , k = 3 ") == m
    assert parse_mechanism({"name": "toy-first", "eps": 2, "k": 3}) == m
    assert parse_mechanism("toy-first") == FirstDocuments()  # the defaults
    assert parse_mechanism(m) is m and is_mechanism(m) and not is_mechanism("toy-first")
    # each value as its parameter declares it: a float, an integer, an optional string
    assert parameters(FirstDocuments) == {"eps": float, "k": int, "label": str | None}
    assert parse_mechanism("toy-first:k=2.0,label=none") == FirstDocuments(k=2, label=None)
    assert parse_mechanism("toy-first:label=a").label == "a"


@pytest.mark.parametrize("spec, says", [
    ("nope:eps=1", "no mechanism named 'nope'; choose one of: "),
    ("toy-first:epsilon=1", "toy-first has no parameter 'epsilon'; its parameters: eps, k, label"),
    ("toy-first:eps=x", "eps=x is not a number"),
    ("toy-first:k=1.5", "k=1.5 is not an integer"),
    ("toy-first:eps=0", "eps: 0.0 is not > 0"),          # the class's own check, named
    ("toy-first:eps", "'eps' is not param=value"),
    ("toy-first:eps=1,eps=2", "gives eps twice"),
    ("toy first", "is not 'name' or 'name:param=value,...'"),
    (3, "is not a mechanism"),
])
def test_bad_specs_are_one_line_naming_the_spec_and_the_fault(spec, says):
    with pytest.raises(ConfigError) as err:
        parse_mechanism(spec)
    assert err.value.param == "mechanisms" and says in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["dp-vote:eps=2,shards=4",
                                  "dp-sparse-vote:eps=2,shards=4,threshold=0.25"])
def test_the_dp_votes_parse_by_name_and_their_keys_parse_back(spec):
    m = parse_mechanism(spec)
    assert m.name == spec.split(":")[0] and m.eps == 2.0 and m.shards == 4
    assert parse_mechanism(m.key()) == m
    with pytest.raises(ConfigError, match="eps") as err:  # the class's one line, named
        parse_mechanism(spec.replace("eps=2", "eps=0"))
    assert err.value.param == "mechanisms" and "\n" not in str(err.value)


def test_every_real_mechanism_is_registered_and_a_missing_module_is_named():
    assert {"dp-vote", "dp-sparse-vote", "dp-rag", "scrub"} <= set(MECHANISMS)
    # scrubbing finds what to scrub with the one detection layer
    assert SUPPLIED["scrub"]["detect"] is find_sensitive
    if "test-missing" not in MECHANISMS:
        MECHANISMS.add("test-missing", "ctxleak.mitigations.not_a_module:Nothing")
    with pytest.raises(ConfigError, match="'test-missing' is not available in this "
                                          "installation") as err:
        parse_mechanism("test-missing:eps=1")
    assert err.value.param == "mechanisms"


def test_dp_rag_parses_by_name_and_a_text_its_class_cannot_read_is_one_line():
    m = parse_mechanism("dp-rag:eps=5,top_k=2")
    assert (m.name, m.eps, m.top_k) == ("dp-rag", 5.0, 2)
    # every parameter that changes the decoding is in the key, so a resume tells them apart
    m = parse_mechanism("dp-rag:eps=5,top_k=2,score_range=-1:1,grid=16")
    assert (m.top_k, m.score_range, m.grid) == (2, (-1.0, 1.0), 16)
    assert m.key() == "dp-rag(eps=5,delta=0.001,top_k=2,score_range=-1:1,grid=16)"
    assert parse_mechanism(m.key()) == m
    assert parse_mechanism("dp-rag:eps=5").key() == "dp-rag(eps=5,delta=0.001)"
    with pytest.raises(ConfigError) as err:  # a pair is written low:high
        parse_mechanism("dp-rag:eps=5,score_range=0")
    assert str(err.value) == ("mechanisms: 'dp-rag:eps=5,score_range=0': score_range: '0' is "
                              "not two numbers low:high, e.g. 0:1")


def test_scrubbing_parses_by_name_with_the_one_detection_layer():
    m = parse_mechanism("scrub:operator=mask,entities=person+email")
    assert (m.operator, m.entities, m.detect) == ("mask", ("person", "email"), find_sensitive)
    assert parse_mechanism(m.key()) == m
    with pytest.raises(ConfigError, match="operator: 'blur' is not a Presidio operator") as err:
        parse_mechanism("scrub:operator=blur")
    assert err.value.param == "mechanisms"


@pytest.mark.parametrize("spec,says", [
    ("dp-rag:eps=2_0", "eps=2_0 is not a number"),  # float() would read 20
    ("dp-rag:eps=\uff12", "is not a number"),  # a full-width digit
    ("dp-rag:eps=\u0665", "is not a number"),  # an Arabic-Indic digit
    ("dp-rag:eps=nan", "eps=nan is not a number"),
    ("dp-rag:eps=1e400", "is not a number"),  # infinite
    ("dp-rag:eps=5,", "a comma too many"),
    ("dp-rag:eps=5,,delta=0.001", "a comma too many"),
])
def test_numbers_are_ascii_and_finite_and_no_parameter_is_empty(spec, says):
    with pytest.raises(ConfigError) as err:
        parse_mechanism(spec)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert parse_mechanism("dp-rag:eps=.5,delta=1e-3").key() == "dp-rag(eps=0.5,delta=0.001)"


@pytest.mark.parametrize("field,bad", [("temperature", float("nan")),
                                       ("temperature", float("inf")),
                                       ("temperature", -0.5), ("max_new_tokens", -1),
                                       ("min_new_tokens", 2.5)])
def test_decoding_settings_are_refused_before_any_mechanism_decodes(field, bad):
    from ctxleak.mitigations.mechanisms import Decoding

    with pytest.raises(ConfigError, match=field):
        Decoding(**{field: bad})
