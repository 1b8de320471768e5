"""The bundled ``demo-datastore``: a datastore where common facts are stated in many documents and
private ones in a single document (``scripts/make_demo_datastore.py`` writes it), its questions
(each over its top BM25 document) and the ``fact`` field the loader reads."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.catalog import datasets
from ctxleak.methods.influence.data import DEMO_SETS, load_examples, resolve_data
from ctxleak.methods.tradeoff.utility import normalize_answer
from ctxleak.mitigations.bm25 import BM25
from ctxleak.run.records import demo_path

ROOT = Path(__file__).resolve().parents[1]


def _jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _documents() -> list[dict]:
    return _jsonl(demo_path("datastore/documents.jsonl"))


def _questions() -> list[dict]:
    return _jsonl(resolve_data("demo-datastore"))


@functools.lru_cache(maxsize=None)
def _padded(text: str) -> str:
    return f" {normalize_answer(text)} "


def _holders(docs: list[dict], answer: str) -> list[str]:
    ref = normalize_answer(answer)
    return [d["id"] for d in docs if f" {ref} " in _padded(d["text"])]


def test_documents_sizes_kinds_and_the_old_documents_unchanged():
    docs = _documents()
    assert len(docs) >= 256 and len({d["id"] for d in docs}) == len(docs)
    assert all(set(d) == {"id", "text", "fact"} and d["fact"] in ("common", "private")
               for d in docs)
    common = [d for d in docs if d["fact"] == "common"]
    assert len(common) >= 208
    assert all(30 <= len(d["text"].split()) <= 70 for d in common)
    old = {d["id"]: d["text"] for row in _jsonl(demo_path("rag_qa_large.jsonl"))
           for d in row["documents"]}
    private = {d["id"]: d["text"] for d in docs if d["fact"] == "private"}
    assert private == old and len(old) == 48  # every old document, byte for byte


def test_common_facts_in_many_documents_private_ones_in_their_own():
    docs = _documents()
    common_ids = {d["id"] for d in docs if d["fact"] == "common"}
    questions = _questions()
    common_refs = {q["reference"] for q in questions if q["fact"] == "common"}
    assert 8 <= len(common_refs) <= 12
    for ref in common_refs:
        holders = _holders(docs, ref)
        assert len(holders) >= 40 and set(holders) <= common_ids, (ref, len(holders))
        assert 1 <= len(ref.split()) <= 3
    for row in _jsonl(demo_path("rag_qa_large.jsonl")):  # every private answer, asked or not
        assert _holders(docs, row["reference"]) == [row["gold"]], row["id"]


def test_questions_their_documents_and_references():
    docs = _documents()
    texts = {d["id"]: d["text"] for d in docs}
    questions = _questions()
    assert len({q["id"] for q in questions}) == len(questions)
    by_fact = Counter(q["fact"] for q in questions)
    assert by_fact["private"] >= 64 and by_fact["common"] >= 24 and len(by_fact) == 2
    kinds = {r["kind"] for r in _jsonl(demo_path("rag_qa_large.jsonl"))}
    assert {q["kind"] for q in questions if q["fact"] == "private"} == kinds
    per_ref = Counter(q["reference"] for q in questions if q["fact"] == "common")
    assert all(2 <= n <= 4 for n in per_ref.values())
    index = BM25(tuple((d["id"], d["text"]) for d in docs))
    hits = 0
    for q in questions:
        assert q["task"] == "qa" and q["gold"] in texts, q["id"]
        ref = normalize_answer(q["reference"])
        assert ref not in normalize_answer(q["query"]), q["id"]
        assert q["gold"] in _holders(docs, q["reference"]), q["id"]
        assert [(d["id"], d["score"]) for d in q["documents"]] == \
            [(docs[i]["id"], s) for i, s in index.search(q["query"], 1)], q["id"]
        assert all(d["text"] == texts[d["id"]] for d in q["documents"])
        ids = [d["id"] for d in q["documents"]]
        hits += q["gold"] in ids
        if q["fact"] == "common":
            assert q["gold"] in ids, q["id"]  # a retrieved document states the answer
    assert hits >= 0.9 * len(questions)


def test_loads_with_its_fact_and_is_listed():
    assert DEMO_SETS["demo-datastore"] == "datastore/questions.jsonl"
    rows = _questions()
    examples = load_examples("demo-datastore")
    assert [str(ex.id) for ex in examples] == [r["id"] for r in rows]
    assert [ex.fact for ex in examples] == [r["fact"] for r in rows]
    assert all(ex.documents is not None and len(ex.documents) == 1 for ex in examples)
    listed = {(d.name, d.command): d.rows for d in datasets()}
    assert listed[("demo-datastore", "influence")] == f"{len(rows)} questions"


def test_fact_is_optional_and_checked(tmp_path):
    rows = [{"context": "Ada lives in Leeds.", "query": "Where does Ada live?"},
            {"context": "Bo lives in York.", "query": "Where does Bo live?", "fact": "common"}]
    assert [ex.fact for ex in load_examples(rows)] == [None, "common"]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({**rows[1], "fact": fact}) + "\n"
                            for fact in ("private", "public")), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_examples(str(path))
    assert info.value.line == 2 and info.value.field == "fact"
    assert "rows.jsonl:2" in str(info.value) and "'public'" in str(info.value)


def test_the_bundled_files_are_what_the_script_writes(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "make_demo_datastore", ROOT / "scripts" / "make_demo_datastore.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts src/ first
    spec.loader.exec_module(module)
    files, summary = module.build()  # it asserts its invariants as it builds
    for name, text in files.items():
        assert (demo_path("datastore") / name).read_text(encoding="utf-8") == text, name
    assert any("148/148" in line for line in summary), summary


def test_every_record_carries_the_fact(llama_lm, tmp_path):
    """A run's records say which kind of fact their question asks for (a tiny random model)."""
    rows = [{"id": "c", "context": "the canteen is the galley .", "query": "canteen ?",
             "fact": "common"},
            {"id": "p", "context": "ada earns 40 pounds .", "query": "ada ?", "fact": "private"},
            {"id": "n", "context": "bo lives in york .", "query": "bo ?"}]
    result = ctxleak.influence(llama_lm, rows, max_new_tokens=2, min_new_tokens=0, seed=1,
                               control=False, progress=False, output=str(tmp_path / "run"))
    assert {r["id"]: r["fact"] for r in result.records} == {"c": "common", "p": "private",
                                                            "n": None}


def test_demo_datastore_is_asked_under_its_apps_short_answer_prompt_by_default():
    from ctxleak.methods.influence.params import InfluenceParams
    from ctxleak.methods.rag.app_prompt import load_prompt_messages

    short = load_prompt_messages("short-answer")
    assert InfluenceParams().app_choice("demo-datastore").messages == short
    assert InfluenceParams().app_choice("demo-qa-large").messages is None
    assert InfluenceParams(app_prompt=False).app_choice("demo-datastore").messages is None
    own = [{"role": "user", "content": "{context} {query}"}]
    assert InfluenceParams(prompt_messages=own).app_choice("demo-datastore").messages \
        == load_prompt_messages(own)
