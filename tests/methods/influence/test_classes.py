"""Document classes and the deployed decoding in the influence run (issue 82, item 3): public
documents stay in every prompt at full strength (CID's prompt without the documents included)
and the mechanisms read the private ones only, as the privacy proxy serves them; a question
whose documents are all public is decoded as plain decoding decodes it under every setting; the
sweep's default temperature follows the deployed one, greedy included."""

from __future__ import annotations

import pytest

import ctxleak
from ctxleak.engine.generation import derive_seed, sample
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.classes import private_datastore, with_classes
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.influence.pipeline import Job, example_parts
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.prompts import template_prompt
from ctxleak.run.classes import resolve_classes

ROWS = [{"id": f"q{i}", "query": q, "reference": r,
         "documents": [{"id": f"q{i}-d{j}", "text": t} for j, t in enumerate(docs)]}
        for i, (q, r, docs) in enumerate((
            ("where is rome ?", "italy", ["rome is in italy .", "paris is in france ."]),
            ("who is the doctor ?", "anna", ["the doctor is anna .", "berlin is big ."])))]
ALL_PUBLIC = {d["id"]: "public" for row in ROWS for d in row["documents"]}
#: q0's second document public, its first restricted
MIXED = {"q0-d0": "restricted", "q0-d1": "public"}
KW = dict(max_new_tokens=4, min_new_tokens=0, seed=3, progress=False, control=False)


def test_an_all_public_question_is_plain_decoding_under_every_setting(llama_lm, tmp_path):
    """CID at λ = 0 and 0.5, and bounded CID at ε = 0.05 per token, each draw the very tokens
    plain decoding (λ = 1, no classes) draws from the same seed: both of CID's prompts hold the
    public documents, so the influence charged to the documents is 0, where without the classes
    it is not."""
    kw = dict(KW, temperature=1.0, max_new_tokens=6)
    plain = ctxleak.influence(llama_lm, ROWS, output=str(tmp_path / "plain"), **kw)
    swept = ctxleak.influence(llama_lm, ROWS, lambda_="0,0.5,1", bounded_eps="none,0.05",
                              classes=ALL_PUBLIC, output=str(tmp_path / "classes"), **kw)
    want = {r["id"]: r["response_ids"] for r in plain.records}
    assert len(swept.records) == 2 * 5  # λ 0 once, 0.5 and 1 with and without the bound
    for record in swept.records:
        assert record["response_ids"] == want[record["id"]], record["setting"]
        assert record["influence"] == pytest.approx(0.0, abs=1e-6)
    assert all(r["influence"] > 1e-3 for r in plain.records)


def test_a_mixed_question_bounds_only_its_private_documents(llama_lm):
    example = with_classes(load_examples(ROWS[:1])[0], MIXED)
    # the public document first, as the proxy renders it
    assert [d.id for d in example.documents] == ["q0-d1", "q0-d0"]
    assert example.public == ("paris is in france .",)
    options = InfluenceOptions(max_new_tokens=4, min_new_tokens=0)
    setting = Setting.cid(0.5, 1.0)
    parts, _ = example_parts(llama_lm, example, setting, options)
    template = template_prompt(llama_lm, example.query, reserve=4)
    assert parts.full == template(["paris is in france .", "rome is in italy ."])
    assert parts.empty == template(["paris is in france ."])  # CID's "without" side
    # a mechanism reads the private document only; each of its prompts holds the public one
    request = answer_request(llama_lm, Job(example, setting, 0), options)
    assert request.documents == ("rome is in italy .",) and request.ids == ("q0-d0",)
    assert request.prompt([]) == parts.empty and request.prompt(["x"]) == template(
        ["paris is in france .", "x"])
    # an example without a public document is left as it was
    other = load_examples(ROWS[1:])[0]
    assert with_classes(other, MIXED) is other


def test_the_mechanisms_datastore_holds_the_private_documents_only():
    store = Datastore((("a", "one"), ("b", "two"), ("c", "three")))
    kept = private_datastore(store, {"a": "public", "b": "restricted"})
    assert [i for i, _ in kept.documents] == ["b", "c"]
    assert private_datastore(store, None) is store
    assert private_datastore(store, {k: "public" for k in "abc"}) is None


def test_classes_are_read_as_the_proxy_reads_them(tmp_path):
    bundled = resolve_classes("demo-datastore")
    assert len(bundled) == 288 and sum(c == "public" for c in bundled.values()) == 240
    path = tmp_path / "classes.jsonl"
    path.write_text('{"id": "a", "class": "public"}\n{"id": "a", "class": "internal"}\n')
    with pytest.raises(Exception, match=r"classes.jsonl:2, field 'class'") as info:
        resolve_classes(str(path))
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="classes: no file"):
        InfluenceParams(classes=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match="classes"):
        InfluenceParams(classes=3)


def test_the_sweep_follows_the_deployed_temperature():
    assert InfluenceParams(deployed_temperature=0.5).with_default_temperature(False) \
        .temperatures == [0.5]
    greedy = InfluenceParams(deployed_temperature=0).with_default_temperature(False)
    assert greedy.temperatures == [1.0] and greedy.options().greedy
    # a temperature given wins (the audit then differs from the deployment, said elsewhere)
    given = InfluenceParams(temperature=0.8, deployed_temperature=0)
    assert given.with_default_temperature(False).temperatures == [0.8]
    assert not InfluenceParams().options().greedy
    for bad in (-1, float("nan"), True):
        with pytest.raises(ConfigError) as info:
            InfluenceParams(deployed_temperature=bad)
        assert info.value.param == "deployed_temperature"


def test_a_greedy_deployment_is_decoded_greedily(llama_lm, tmp_path):
    result = ctxleak.influence(llama_lm, ROWS, deployed_temperature=0,
                               output=str(tmp_path / "g"), **KW)
    assert result.config["deployed_temperature"] == 0.0
    for k, (row, record) in enumerate(zip(ROWS, result.records)):
        assert record["temperature"] == 1.0
        full = template_prompt(llama_lm, row["query"], reserve=4)(
            [d["text"] for d in row["documents"]])
        (g,), = sample(llama_lm, [full], [derive_seed(3, k)], temperature=0.0, max_new_tokens=4)
        assert record["response_ids"] == list(g.token_ids)
