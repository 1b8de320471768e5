"""Retrieved documents in data rows (Def. 3.1 of "Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models" with S = one document): strings, dicts and framework
documents become passages that keep their id, source, metadata, rank and score in the records;
passages are numbered from 1; bad documents are refused naming the query, document and field."""

from __future__ import annotations

import pytest
from helpers.fake_documents import HaystackDoc, LangChainDoc, LlamaNode, NodeWithScore

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.checks import CHECKS
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.rag.documents import to_document

QUERY = "what is the capital ?"
ROWS = [
    {"id": "q1", "query": QUERY, "documents": [
        {"text": "the capital of france is paris .", "id": "hr-1", "source": "hr.pdf",
         "metadata": {"page": 3}, "score": 0.9},
        "rome is the capital of italy .",
        {"content": "berlin is in germany .", "meta": {"source": "wiki/berlin"}, "score": 0.2}]},
    {"id": "q2", "query": QUERY, "documents": [
        {"text": "the doctor said the news report was one page .", "id": "hr-2"},
        {"text": "the capital of france is paris .", "id": "hr-1"}]},
]


def test_documents_keep_their_names_in_the_records(llama_lm, tmp_path):
    res = ctxleak.influence(llama_lm, ROWS, max_new_tokens=4, min_new_tokens=0, seed=1,
                            progress=False, output=str(tmp_path / "run"))
    r, r2 = res.records
    assert r["passages"] == ["the capital of france is paris .",
                             "rome is the capital of italy .", "berlin is in germany ."]
    assert r["passage_ids"] == ["hr-1", "2", "3"]
    assert r["passage_sources"] == ["hr.pdf", None, "wiki/berlin"]
    assert r["passage_scores"] == [0.9, None, 0.2]
    assert r["passage_ranks"] == [1, 2, 3]
    assert r["passage_metadata"] == [{"page": 3}, {}, {"source": "wiki/berlin"}]
    assert r2["passage_ids"] == ["hr-2", "hr-1"] and r2["passage_ranks"] == [1, 2]
    for rec in res.records:  # numbered from 1, and its id is that passage's
        top = rec["max_passage"]
        assert 1 <= top <= len(rec["passages"])
        assert rec["passage_influence"][top - 1] == rec["max_passage_influence"]
        assert rec["max_passage_influence"] == max(rec["passage_influence"])
        assert rec["max_passage_id"] == rec["passage_ids"][top - 1]
        assert CHECKS.row_problem(rec) is None
    loaded = ctxleak.load_result(tmp_path / "run")
    assert loaded.records[0]["passage_ids"] == ["hr-1", "2", "3"]


def test_a_stored_max_passage_is_checked_as_numbered_from_1():
    row = {"passage_influence": [0.5, 2.0, 1.0], "max_passage_influence": 2.0,
           "max_passage": 2, "passage_ids": ["a", "b", "c"], "max_passage_id": "b"}
    assert CHECKS.row_problem(row) is None
    assert CHECKS.row_problem({**row, "max_passage": 1})[0] == "max_passage"  # 0-based: wrong
    assert CHECKS.row_problem({**row, "max_passage": 0})[0] == "max_passage"
    assert CHECKS.row_problem({**row, "max_passage": 4})[0] == "max_passage"
    assert CHECKS.row_problem({**row, "max_passage_id": "a"})[0] == "max_passage_id"


def test_framework_documents_are_read_by_their_attributes():
    lc = to_document(LangChainDoc("a fact .", {"source": "notes.txt", "when": object()}, "x1"),
                     1)
    assert (lc.id, lc.source, lc.rank, lc.score) == ("x1", "notes.txt", 1, None)
    assert isinstance(lc.metadata["when"], str)  # JSON-safe
    node = to_document(NodeWithScore(LlamaNode("chunk .", "n-7", "doc-3", {"k": 1}), 0.75), 2)
    assert (node.text, node.id, node.source, node.score, node.rank) == (
        "chunk .", "n-7", "doc-3", 0.75, 2)
    hay = to_document(HaystackDoc("hay .", "h1", {"file": "f"}, 3.5), 3)
    assert (hay.text, hay.id, hay.metadata, hay.score) == ("hay .", "h1", {"file": "f"}, 3.5)


def test_framework_documents_in_memory_rows_become_passages():
    rows = [{"query": QUERY, "documents": [
        LangChainDoc("one .", {}, "a"), NodeWithScore(LlamaNode("two .", "b", "B", {}), 1.0),
        HaystackDoc("three .", "c", {}, None)]}]
    (ex,) = load_examples(rows)
    assert ex.passage_texts == ["one .", "two .", "three ."]
    assert [d.id for d in ex.documents] == ["a", "b", "c"]
    assert ex.context == "one .\n\ntwo .\n\nthree ."


@pytest.mark.parametrize("documents, field, words", [
    ([{"text": "fine ."}, {"id": "b", "metadata": {}}], "documents.text",
     ["query 'who ?'", "document 2 (id 'b')", "no text"]),
    ([{"text": "fine ."}, {"text": "   ", "id": 7}], "documents.text",
     ["document 2 (id '7')", "empty"]),
    ([], "documents", ["query 'who ?'", "the retriever returned nothing"]),
    ([{"text": "x ."}, 12], "documents", ["document 2", "int"]),
    ([{"text": "x .", "score": "high"}], "documents.score", ["document 1", "number"]),
])
def test_bad_documents_name_the_query_document_and_field(documents, field, words):
    with pytest.raises(InputError) as info:
        load_examples([{"query": "who ?", "documents": documents}])
    assert info.value.field == field and info.value.line == 1
    for word in words:
        assert word in str(info.value)


def test_one_id_with_two_texts_is_refused_across_the_data():
    rows = [{"query": "a ?", "documents": [{"text": "one .", "id": "d"}]},
            {"query": "b ?", "documents": [{"text": "same .", "id": "e"},
                                           {"text": "other .", "id": "d"}]}]
    with pytest.raises(InputError) as info:
        load_examples(rows)
    assert info.value.line == 2 and info.value.field == "documents.id"
    assert "query 'b ?'" in str(info.value) and "document 2 (id 'd')" in str(info.value)
    assert "retrieved for query 'a ?'" in str(info.value)  # where the first text came from
    rows[1]["documents"][1]["text"] = "one ."  # the same document retrieved again: fine
    assert len(load_examples(rows)) == 2
