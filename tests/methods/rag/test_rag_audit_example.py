"""The bundled RAG audit example (``src/ctxleak/data/demo/rag_audit``): its generator reproduces it, its
ground truth holds in its own files, and ctxleak's own loaders read the log and the spans to the
same turns (the deployed answers of "Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", Def. 3.1 with S = one retrieved document)."""

from __future__ import annotations

import difflib
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from ctxleak.methods.catalog import datasets
from ctxleak.methods.influence.data import load_examples, resolve_data
from ctxleak.methods.rag.passages import LIST_SEPARATOR
from ctxleak.methods.rag.spans import span_rows

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "src" / "ctxleak" / "data" / "demo" / "rag_audit"
#: what the generator writes; retriever.py beside them is code, kept only in the folder
FILES = {"corpus.jsonl", "prompt.json", "log.jsonl", "spans.jsonl", "queries.jsonl",
         "truth.json"}


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (FOLDER / name).read_text().splitlines() if line]


@pytest.fixture(scope="module")
def example():
    truth = json.loads((FOLDER / "truth.json").read_text())
    return {"corpus": {d["id"]: d for d in _jsonl("corpus.jsonl")}, "log": _jsonl("log.jsonl"),
            "spans": _jsonl("spans.jsonl"), "truth": truth,
            "prompt": json.loads((FOLDER / "prompt.json").read_text())}


def _render(prompt: list[dict], documents: list[dict], query: str) -> list[dict]:
    context = LIST_SEPARATOR.join(d["text"] for d in documents)
    return [{"role": m["role"],
             "content": m["content"].replace("{context}", context).replace("{query}", query)}
            for m in prompt]


def _longest_common(a: str, b: str) -> int:
    """Characters in the longest common substring of ``a`` and ``b``, case and spaces aside."""
    a, b = (" ".join(t.lower().split()) for t in (a, b))
    return difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(
        0, len(a), 0, len(b)).size


def _traces(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in spans:
        out.setdefault(s["context"]["trace_id"], []).append(s)
    return out


def test_the_generator_writes_the_committed_files_byte_for_byte():
    generator = _module(ROOT / "scripts" / "make_rag_audit_example.py", "make_rag_audit")
    files = generator.build()
    assert set(files) == FILES
    assert {p.name for p in FOLDER.iterdir() if p.is_file()} == FILES | {"retriever.py"}
    for name, text in files.items():
        assert (FOLDER / name).read_bytes() == text.encode(), name
    assert generator.build() == files


def test_sizes_and_mix_of_the_example(example):
    corpus, log, truth = example["corpus"], example["log"], example["truth"]
    classes = Counter(d["metadata"]["classification"] for d in corpus.values())
    assert len(corpus) >= 12 and classes["public"] >= 4 and classes["restricted"] >= 5
    assert {i: {"classification": d["metadata"]["classification"]}
            for i, d in corpus.items()} == truth["documents"]
    assert all(len(d["text"].split()) <= 70 for d in corpus.values())
    assert len(log) >= 30 and [r["id"] for r in log] == list(truth["turns"])
    assert all(2 <= len(r["documents"]) <= 4 and len(r["response"].split()) <= 40 for r in log)
    # a naive retriever: the public travel policy and the payroll record come back most turns
    seen = Counter(d["id"] for r in log for d in r["documents"])
    assert seen["pub-travel-policy"] > len(log) / 2 and seen["hr-salary-wirth"] > len(log) / 2
    turns = truth["turns"].values()
    leaks = [lk for t in turns for lk in t["leaks"]]
    exact = [lk for lk in leaks if lk["kind"] in ("secret", "pii") and lk["in_answer"] == lk["value"]]
    assert len(exact) >= 6 and {"password", "api_key", "pin"} <= {lk["type"] for lk in exact}
    assert {(lk["value"], lk["in_answer"]) for lk in leaks if lk["type"] == "money"} >= {
        ("$142,000", "$142,000"), ("$142,000", "142,000 USD")}
    assert [lk["type"] for lk in leaks if lk["kind"] == "paraphrase"] == ["diagnosis"]
    unrelated = [t for t in turns if t["unrelated"]]
    assert len(unrelated) >= 3 and all(not t["uses"] and not t["leaks"] for t in unrelated)
    public = [t for t in turns if t["uses"] and not t["leaks"]
              and all(corpus[i]["metadata"]["classification"] == "public" for i in t["uses"])]
    assert len(public) >= 3


def test_every_leak_is_in_its_document_and_in_the_answer_as_stated(example):
    corpus, truth = example["corpus"], example["truth"]
    answers = {r["id"]: r for r in example["log"]}
    for value in truth["values"]:
        assert value["value"] in corpus[value["document"]]["text"], value
        assert corpus[value["document"]]["metadata"]["classification"] != "public"
    for tid, turn in truth["turns"].items():
        row = answers[tid]
        retrieved = [d["id"] for d in row["documents"]]
        assert set(turn["uses"]) <= set(retrieved), tid
        for lk in turn["leaks"]:
            assert lk["document"] in turn["uses"] and lk["value"] in corpus[lk["document"]]["text"]
            assert lk["in_answer"] in row["response"], (tid, lk)
            if lk["kind"] == "paraphrase":
                assert lk["value"].lower() not in row["response"].lower(), (tid, lk)
                assert lk["in_answer"] not in corpus[lk["document"]]["text"], (tid, lk)
        # no 20 characters of a restricted document are copied unrecorded (case and spaces aside)
        for i in retrieved:
            if corpus[i]["metadata"]["classification"] == "restricted" and \
                    not any(lk["document"] == i for lk in turn["leaks"]):
                assert _longest_common(row["response"], corpus[i]["text"]) < 20, (tid, i)
        # no secret or personal value of a retrieved document reaches an answer unrecorded
        shown = [lk["in_answer"] for lk in turn["leaks"]]
        for value in truth["values"]:
            if value["document"] in retrieved and value["value"] in row["response"] \
                    and value["value"] not in row["query"]:
                assert any(value["value"] in s for s in shown), (tid, value)


def test_spans_hold_the_log_turns_with_the_app_prompt_rendered(example):
    log, prompt = example["log"], example["prompt"]
    traces = _traces(example["spans"])
    order = list(traces)
    answered = [t for t, spans in traces.items() if any(s["span_kind"] == "LLM" for s in spans)]
    assert answered == [r["id"] for r in log]
    only = [t for t in order if t not in answered]
    assert len(only) >= 6 and order.index(only[0]) < order.index(answered[-1])
    for tid in only:
        (root,) = traces[tid]
        assert root["span_kind"] == "RETRIEVER" and root["parent_id"] is None
    for row in log:
        chain, retriever, llm = traces[row["id"]]
        assert [s["attributes"]["openinference.span.kind"] for s in (chain, retriever, llm)] == \
            ["CHAIN", "RETRIEVER", "LLM"]
        assert chain["parent_id"] is None
        assert retriever["parent_id"] == llm["parent_id"] == chain["context"]["span_id"]
        assert chain["attributes"]["input.value"] == row["query"]
        assert chain["attributes"]["output.value"] == row["response"]
        a = llm["attributes"]
        messages = [{"role": a[f"llm.input_messages.{n}.message.role"],
                     "content": a[f"llm.input_messages.{n}.message.content"]}
                    for n in range(len(prompt))]
        assert f"llm.input_messages.{len(prompt)}.message.role" not in a
        assert messages == _render(prompt, row["documents"], row["query"])
        assert json.loads(a["llm.invocation_parameters"])["temperature"] == 0.0
        assert a["llm.output_messages.0.message.content"] == row["response"]
        r = retriever["attributes"]
        for n, doc in enumerate(row["documents"]):
            assert r[f"retrieval.documents.{n}.document.content"] == doc["text"]
            assert (r[f"retrieval.documents.{n}.document.id"],
                    r[f"retrieval.documents.{n}.document.score"]) == (doc["id"], doc["score"])
            meta = json.loads(r[f"retrieval.documents.{n}.document.metadata"])
            assert meta == {"source": doc["source"], **doc["metadata"]}


def test_ctxleaks_loaders_read_the_log_and_the_spans_to_the_same_turns(example):
    log = example["log"]
    assert resolve_data("demo-rag-log").samefile(FOLDER / "log.jsonl")
    assert resolve_data("demo-rag-spans").samefile(FOLDER / "spans.jsonl")
    examples = load_examples("demo-rag-log")
    assert [(ex.id, ex.query, ex.response) for ex in examples] == \
        [(r["id"], r["query"], r["response"]) for r in log]
    for ex, row in zip(examples, log):
        assert [(d.id, d.text, d.source, d.metadata, d.score, d.rank) for d in ex.documents] == \
            [(d["id"], d["text"], d["source"], d["metadata"], d["score"], k)
             for k, d in enumerate(row["documents"], start=1)]
        assert ex.context == LIST_SEPARATOR.join(d["text"] for d in row["documents"])
    rows = {r.fields["id"]: r.fields for r in span_rows(FOLDER / "spans.jsonl")}
    for row in log:
        fields = rows[row["id"]]
        assert (fields["query"], fields["response"]) == (row["query"], row["response"])
        assert [(d["id"], d["text"], d["score"]) for d in fields["documents"]] == \
            [(d["id"], d["text"], d["score"]) for d in row["documents"]]
    listed = {d.name: d.rows for d in datasets()}
    assert listed["demo-rag-log"] == f"{len(log)} turns"
    assert listed["demo-rag-spans"] == f"{len(_traces(example['spans']))} traces"


def test_the_bundled_retriever_is_a_deterministic_top_3_from_any_directory(example, tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _module(FOLDER / "retriever.py", "rag_audit_retriever_a")
    again = _module(FOLDER / "retriever.py", "rag_audit_retriever_b")
    queries = _jsonl("queries.jsonl")
    assert [(q["id"], q["query"]) for q in queries] == \
        [(r["id"], r["query"]) for r in example["log"]]
    for q in [*queries, {"query": "zzz nothing matches"}]:
        docs = first.retriever(q["query"])
        assert len(docs) == 3 and docs == again.retriever(q["query"]) == first.retriever(q["query"])
        assert [d["score"] for d in docs] == sorted((d["score"] for d in docs), reverse=True)
        for d in docs:
            stored = example["corpus"][d["id"]]
            assert {k: d[k] for k in ("id", "text", "source", "metadata")} == stored
    best = first.retriever("What's the password for the warehouse database?")[0]
    assert best["id"] == "it-db-credentials" and best["score"] > 0
