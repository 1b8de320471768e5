"""Logged answers as token ids (the ``response_ids`` field): scored exactly as given, not
re-tokenised; checked against the model's vocabulary and the logged text; every record says
where its answer came from (``response_source``)."""

from __future__ import annotations

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.data import load_examples

CONTEXT = "the capital of france is paris . berlin is in germany ."
QUERY = "what is the capital ?"


def _run(lm, rows, tmp_path, name="run"):
    return ctxleak.influence(lm, rows, max_new_tokens=3, min_new_tokens=0, seed=3,
                             control=False, progress=False, output=str(tmp_path / name))


def test_logged_ids_are_scored_as_given_and_each_record_names_its_source(llama_lm, tmp_path):
    text_ids = llama_lm.encode("paris is")
    odd = [text_ids[0], *llama_lm.tokenizer.all_special_ids[:1], *text_ids[1:]]
    assert llama_lm.decode(odd) == "paris is" and odd != text_ids  # re-tokenising loses one
    rows = [{"id": "ids", "context": CONTEXT, "query": QUERY, "response": "paris is",
             "response_ids": odd},
            {"id": "same", "context": CONTEXT, "query": QUERY, "response_ids": text_ids},
            {"id": "text", "context": CONTEXT, "query": QUERY, "response": "paris is"},
            {"id": "gen", "context": CONTEXT, "query": QUERY}]
    by_id = {r["id"]: r for r in _run(llama_lm, rows, tmp_path).records}
    assert by_id["ids"]["response_ids"] == odd and len(by_id["ids"]["token_influence"]) == 3
    assert by_id["text"]["response_ids"] == text_ids
    assert by_id["ids"]["response"] == by_id["text"]["response"] == "paris is"
    assert [by_id[k]["response_source"] for k in ("ids", "same", "text", "gen")] == [
        "logged ids", "logged ids", "logged text (re-tokenised)", "generated"]
    # the same ids given or re-tokenised: the same numbers; other ids: other numbers
    assert by_id["same"]["influence"] == pytest.approx(by_id["text"]["influence"], abs=1e-9)
    assert by_id["ids"]["influence"] != pytest.approx(by_id["text"]["influence"], abs=1e-6)


@pytest.mark.parametrize("ids, words", [
    ([9, 999], ["outside the model's vocabulary", "999"]),
    ("encode", ["decode to", "'paris is'"]),
])
def test_ids_the_model_cannot_have_produced_are_refused(llama_lm, tmp_path, ids, words):
    if ids == "encode":
        ids = llama_lm.encode("berlin")
    rows = [{"id": "a", "context": CONTEXT, "query": QUERY, "response": "paris is",
             "response_ids": ids}]
    with pytest.raises(InputError) as info:
        _run(llama_lm, rows, tmp_path)
    assert info.value.field == "response_ids"
    for word in [f"query {QUERY!r}", *words]:
        assert word in str(info.value)


@pytest.mark.parametrize("value", [[], [1, "2"], [1.5], [True], [-1], "1 2"])
def test_response_ids_that_are_not_token_ids_are_refused_at_their_line(value):
    rows = [{"context": CONTEXT, "query": QUERY},
            {"context": CONTEXT, "query": QUERY, "response_ids": value}]
    with pytest.raises(InputError) as info:
        load_examples(rows)
    assert info.value.line == 2 and info.value.field == "response_ids"
    assert f"query {QUERY!r}" in str(info.value)
