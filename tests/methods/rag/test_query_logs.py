"""Production logs as the way in (Def. 3.1 of "Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models" with S = one retrieved document, on the deployed answer): a JSONL
of turns is plain rows; OpenInference spans are recognised, grouped by trace id into one row
each; a line of an unknown shape names the file, the line and what was expected."""

from __future__ import annotations

import json

import pytest

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.data import load_examples

QUERY = "what is the capital ?"


def _span(trace, span_id, parent, kind, attributes, nested_trace=True):
    where = {"context": {"trace_id": trace, "span_id": span_id}} if nested_trace \
        else {"trace_id": trace, "span_id": span_id}
    return {"name": kind.lower(), **where, "parent_id": parent,
            "attributes": {"openinference.span.kind": kind, **attributes}}


def _trace(trace, query, answer, docs, nested_trace=True):
    retrieval = {f"retrieval.documents.{n}.document.{k}": v
                 for n, doc in enumerate(docs) for k, v in doc.items()}
    return [_span(trace, "r", None, "CHAIN", {"input.value": query, "output.value": answer},
                  nested_trace),
            _span(trace, "a", "r", "RETRIEVER", {"input.value": query, **retrieval},
                  nested_trace),
            _span(trace, "b", "r", "LLM", {"output.value": answer}, nested_trace)]


def _write(path, spans):
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    return path


DOCS = [{"id": "kb-1", "content": "the capital of france is paris .",
         "metadata": json.dumps({"source": "kb/geo.md"}), "score": 0.8},
        {"id": "kb-2", "content": "berlin is in germany ."}]


def test_openinference_spans_become_one_row_per_trace(tmp_path):
    other = _trace("t2", json.dumps({"query": "where is berlin ?"}), "in germany",
                   [DOCS[1]], nested_trace=False)
    other[0]["attributes"]["input.mime_type"] = "application/json"
    path = _write(tmp_path / "spans.jsonl", [*_trace("t1", QUERY, "paris", DOCS), *other])
    a, b = load_examples(str(path))
    assert (a.id, a.query, a.response) == ("t1", QUERY, "paris")
    assert [(d.id, d.source, d.score, d.rank) for d in a.documents] == [
        ("kb-1", "kb/geo.md", 0.8, 1), ("kb-2", None, None, 2)]
    assert (b.id, b.query, b.response) == ("t2", "where is berlin ?", "in germany")
    assert [d.text for d in b.documents] == ["berlin is in germany ."]
    # nested attributes (as some exporters write them) read the same
    nested = _trace("t1", QUERY, "paris", [])
    nested[1]["attributes"]["retrieval"] = {"documents": [{"document": d} for d in DOCS]}
    (c,) = load_examples(str(_write(tmp_path / "nested.jsonl", nested)))
    assert [d.id for d in c.documents] == ["kb-1", "kb-2"]


def test_a_span_log_is_measured_on_its_logged_answers(llama_lm, tmp_path):
    path = _write(tmp_path / "spans.jsonl", _trace("t1", QUERY, "paris is", DOCS))
    res = ctxleak.influence(llama_lm, str(path), max_new_tokens=3, min_new_tokens=0,
                            progress=False, output=str(tmp_path / "run"))
    (r,) = res.records
    assert r["response_source"] == "logged text (re-tokenised)" and r["response"] == "paris is"
    assert r["passage_ids"] == ["kb-1", "kb-2"] and r["passage_sources"] == ["kb/geo.md", None]


def test_a_jsonl_of_turns_is_rows(tmp_path):
    path = tmp_path / "turns.jsonl"
    path.write_text(json.dumps({"query": QUERY, "documents": [d["content"] for d in DOCS],
                                "response": "paris"}) + "\n")
    (ex,) = load_examples(str(path))
    assert ex.response_source == "logged text (re-tokenised)" and len(ex.documents) == 2
    with pytest.raises(ConfigError) as info:
        load_examples(str(path), log_format="otel")
    assert info.value.param == "log_format"


def test_a_line_of_unknown_shape_names_the_file_line_and_shape(tmp_path):
    spans = _trace("t1", QUERY, "paris", DOCS)
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(spans[0]) + "\n" + json.dumps({"query": QUERY}) + "\n")
    with pytest.raises(InputError) as info:
        load_examples(str(path))
    assert info.value.file == str(path) and info.value.line == 2
    assert "OpenInference span" in str(info.value) and "trace_id" in str(info.value)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"query": QUERY, "context": "x"}) + "\n")
    with pytest.raises(InputError) as info:  # forced, a file of rows is refused at line 1
        load_examples(str(rows), log_format="openinference")
    assert info.value.line == 1 and "expected an OpenInference span" in str(info.value)


def test_a_trace_without_retrieval_says_the_retriever_returned_nothing(tmp_path):
    path = _write(tmp_path / "spans.jsonl", _trace("t9", QUERY, "paris", []))
    with pytest.raises(InputError) as info:
        load_examples(str(path))
    assert "the retriever returned nothing" in str(info.value) and info.value.line == 1


def test_cli_log_format_flag(tiny_dir, tmp_path, capsys):
    from conftest import run_cli

    path = tmp_path / "spans.json"  # not .jsonl: only the flag makes it a span log
    path.write_text("".join(json.dumps(s) + "\n" for s in _trace("t1", QUERY, "paris", DOCS)))
    out = tmp_path / "run"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(path),
                            "--log-format", "openinference", "--max-new-tokens", "2",
                            "--output", str(out)], capsys)
    assert code == 0, err
    (record,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert record["id"] == "t1" and record["passage_ids"] == ["kb-1", "kb-2"]
    assert json.loads((out / "config.json").read_text())["log_format"] == "openinference"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(path),
                            "--log-format", "otel", "--output", str(tmp_path / "x")], capsys)
    assert code == 2 and "--log-format" in err


def _turns(n, corpus):
    """``n`` logged turns, each retrieving 3 of ``corpus`` documents (ids and texts)."""
    return [{"id": f"t{t}", "query": QUERY, "response": f"answer {t}",
             "documents": [corpus[(t + j) % len(corpus)] for j in range(3)]} for t in range(n)]


def test_a_log_holds_each_document_text_once(tmp_path):
    """The same document retrieved in many turns has one text, source and metadata object in all
    of them (a day's log holds references, not copies), as have a repeated query and a repeated
    context; the values are those of the file, the rank each turn's own."""
    corpus = [{"id": f"d{k}", "text": f"Document {k} says {k * 7}.", "source": f"kb/{k}.md",
               "metadata": {"team": "hr" if k % 2 else "it"}} for k in range(4)]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(t) + "\n" for t in _turns(12, corpus)))
    examples = load_examples(str(log))
    by_id = {}
    for ex in examples:
        assert [d.text for d in ex.documents] == \
            [next(c["text"] for c in corpus if c["id"] == d.id) for d in ex.documents]
        for doc in ex.documents:
            first = by_id.setdefault(doc.id, doc)
            assert (first.text, first.source, first.metadata) == \
                (doc.text, doc.source, doc.metadata)
            assert first.text is doc.text and first.source is doc.source
            assert first.metadata is doc.metadata
    assert len(by_id) == 4 and by_id["d1"].metadata == {"team": "hr"}
    assert [d.rank for d in examples[3].documents] == [1, 2, 3]  # per turn, not shared
    assert all(ex.query is examples[0].query for ex in examples)
    assert examples[0].context is examples[4].context  # turn 4 retrieves turn 0's documents
    assert examples[0].passages[1] is examples[3].passages[2]  # d1 after a separator in both
    assert examples[0].response == "answer 0" and examples[1].response == "answer 1"


def test_a_bad_line_late_in_a_log_names_its_line(tmp_path):
    """A line at fault far down a log is named (file, line and field), before any model is
    loaded. (That the file is parsed line by line: tests/run/test_inputs.py.)"""
    corpus = [{"id": "d0", "text": "Document zero."}, {"id": "d1", "text": "Document one."}]
    turns = _turns(50, corpus)
    turns[41]["documents"][1] = {"id": "d1", "text": "Another text under d1."}
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(t) + "\n" for t in turns))
    with pytest.raises(InputError) as err:
        load_examples(str(log))
    assert err.value.line == 42 and err.value.field == "documents.id"
    assert "d1" in str(err.value)
