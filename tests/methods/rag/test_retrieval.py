"""A RAG pipeline's retriever as the way in (Def. 3.1 of "Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models" with S = one retrieved document): ``ctxleak.retrieve``
asks any retriever shape for each query's documents, ``ctxleak.influence(retriever=...)`` and
``ctxleak influence --retriever`` measure them; a failing or empty retriever names the query."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from helpers.fake_documents import HaystackDoc, LangChainDoc, LlamaNode, NodeWithScore

import ctxleak
from ctxleak.api import load_retriever
from ctxleak.errors import ConfigError, InputError

DOCS = {"fr": ("the capital of france is paris .", "geo.txt"),
        "de": ("berlin is in germany .", "geo.txt"),
        "dr": ("the doctor said the news report was one page .", "hr.txt")}


def search(query: str) -> list[dict]:
    """A plain function retriever: every document, those sharing a word with the query first."""
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda k: -len(words & set(DOCS[k][0].split())))
    return [{"text": DOCS[k][0], "id": k, "source": DOCS[k][1], "score": float(3 - i)}
            for i, k in enumerate(ranked)]


class LangChainLike:
    def invoke(self, query):
        return [LangChainDoc(DOCS["fr"][0], {"source": "lc"}, "fr"),
                LangChainDoc(DOCS["de"][0], {"source": "lc"}, "de")]


class LlamaLike:
    def retrieve(self, query):
        return [NodeWithScore(LlamaNode(DOCS["dr"][0], "c1", "book"), 0.5)]


class HaystackLike:
    def run(self, query, top_k=None):
        return {"documents": [HaystackDoc(DOCS["de"][0], "h1", score=2.0)]}


def test_each_retriever_shape_gives_rows_of_documents():
    rows = ctxleak.retrieve(search, ["where is berlin ?", {"query": "capital ?", "id": 7,
                                                            "reference": "paris"}])
    assert [r["query"] for r in rows] == ["where is berlin ?", "capital ?"]
    assert rows[0]["id"] == "1"  # a query without an id: its number from 1
    assert rows[1]["id"] == 7 and rows[1]["reference"] == "paris"
    assert [d["id"] for d in rows[0]["documents"]] == ["de", "fr", "dr"]
    assert [d["rank"] for d in rows[0]["documents"]] == [1, 2, 3]
    (lc,) = ctxleak.retrieve(LangChainLike(), ["q ?"])
    assert [(d["id"], d["source"]) for d in lc["documents"]] == [("fr", "lc"), ("de", "lc")]
    (ll,) = ctxleak.retrieve(LlamaLike(), ["q ?"])
    assert ll["documents"] == [{"id": "c1", "text": DOCS["dr"][0], "source": "book",
                                "metadata": {}, "rank": 1, "score": 0.5}]
    (hs,) = ctxleak.retrieve(HaystackLike(), ["q ?"])
    assert (hs["documents"][0]["id"], hs["documents"][0]["score"]) == ("h1", 2.0)


def test_influence_with_a_retriever_measures_each_document(llama_lm, tmp_path):
    res = ctxleak.influence(llama_lm, ["where is berlin ?", "what is the capital ?"],
                            retriever=search, max_new_tokens=3, min_new_tokens=0,
                            progress=False, output=str(tmp_path / "run"))
    r = res.records[0]
    assert [rec["query"] for rec in res.records] == ["where is berlin ?", "what is the capital ?"]
    assert r["passage_ids"] == ["de", "fr", "dr"] and r["passage_ranks"] == [1, 2, 3]
    assert r["passage_sources"] == ["geo.txt", "geo.txt", "hr.txt"]
    assert r["passage_scores"] == [3.0, 2.0, 1.0]
    assert len(r["passage_influence"]) == 3


def _boom(query):
    raise RuntimeError("index offline")


@pytest.mark.parametrize("retriever, words", [
    (_boom, ["query 'who ?'", "raised RuntimeError: index offline"]),
    (lambda q: [], ["query 'who ?'", "the retriever returned nothing"]),
    (lambda q: None, ["query 'who ?'", "the retriever returned nothing"]),
    (lambda q: [{"id": "x"}], ["query 'who ?'", "document 1 (id 'x')", "no text"]),
])
def test_a_failing_retriever_names_the_query(retriever, words):
    with pytest.raises(InputError) as info:
        ctxleak.retrieve(lambda q: search(q) if q == "fine ?" else retriever(q),
                         ["fine ?", "who ?"])
    assert info.value.line == 2
    for word in words:
        assert word in str(info.value)


def test_a_retriever_of_no_known_shape_is_refused():
    with pytest.raises(ConfigError) as info:
        ctxleak.retrieve(42, ["q ?"])
    assert info.value.param == "retriever" and ".invoke" in str(info.value)


def test_load_retriever_reads_a_file_or_a_module(tmp_path):
    path = tmp_path / "my_rag.py"
    path.write_text("def find(query):\n    return ['one fact .', 'two facts .']\n")
    assert load_retriever(f"{path}:find")("q")[1] == "two facts ."
    assert load_retriever("json:loads") is json.loads
    for bad, word in [(f"{path}:nope", "has no 'nope'"), ("nofile.py:x", "does not exist"),
                      ("find", "PATH.py:NAME"), ("no_such_module_xyz:f", "cannot import")]:
        with pytest.raises(ConfigError) as info:
            load_retriever(bad)
        assert word in str(info.value)


def test_cli_retriever_flag_measures_the_queries_of_data(tiny_dir, tmp_path, capsys):
    path = tmp_path / "rag.py"
    path.write_text("def find(query):\n    return [{'text': 'paris is the capital .', "
                    "'id': 'p1', 'source': 'a.txt'}, 'berlin is in germany .']\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "q1", "query": "what is the capital ?"}) + "\n")
    out = tmp_path / "run"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(queries),
                            "--retriever", f"{path}:find", "--max-new-tokens", "2",
                            "--min-new-tokens", "0", "--output", str(out)], capsys)
    assert code == 0, err
    (record,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert record["id"] == "q1" and record["passage_ids"] == ["p1", "2"]
    assert record["passage_sources"] == ["a.txt", None]
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(queries),
                            "--retriever", f"{path}:nope", "--output", str(tmp_path / "x")],
                           capsys)
    assert code != 0 and "--retriever" in err and "nope" in err
