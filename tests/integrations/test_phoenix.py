"""ctxleak's context influence written back to Arize Phoenix as span annotations (issue 83):
each answered trace of an OpenInference span log, measured by ``ctxleak.influence`` on its
logged answer, becomes one annotation on the trace's LLM span, with the run's own figures (to
the float: they are read from its records, 1e-6 nats), through Phoenix's real client
(``arize-phoenix-client``), its HTTP answered by a mock transport that records what it sent."""

from __future__ import annotations

import json

import httpx
import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.integrations.phoenix import (
    ANNOTATION,
    annotated_spans,
    log_to_phoenix,
    phoenix_annotations,
)

QUERY = "what is the capital ?"
DOCS = [{"id": "kb-1", "content": "the capital of france is paris ."},
        {"id": "kb-2", "content": "berlin is in germany ."}]


def _trace(trace, query, answer, docs, llm=True):
    retrieval = {f"retrieval.documents.{n}.document.{k}": v
                 for n, doc in enumerate(docs) for k, v in doc.items()}
    spans = [{"name": "chain", "context": {"trace_id": trace, "span_id": f"{trace}-root"},
              "parent_id": None, "attributes": {"openinference.span.kind": "CHAIN",
                                                "input.value": query, "output.value": answer}},
             {"name": "retrieve", "context": {"trace_id": trace, "span_id": f"{trace}-ret"},
              "parent_id": f"{trace}-root",
              "attributes": {"openinference.span.kind": "RETRIEVER", "input.value": query,
                             **retrieval}}]
    if llm:
        spans.append({"name": "llm", "context": {"trace_id": trace, "span_id": f"{trace}-llm"},
                      "parent_id": f"{trace}-root",
                      "attributes": {"openinference.span.kind": "LLM", "output.value": answer}})
    return spans


@pytest.fixture
def measured(llama_lm, tmp_path):
    spans = tmp_path / "spans.jsonl"
    lines = [*_trace("t1", QUERY, "paris is", DOCS),
             *_trace("t2", "where is rome ?", "rome is in italy .",
                     [{"id": "kb-3", "content": "rome is in italy ."}])]
    spans.write_text("".join(json.dumps(s) + "\n" for s in lines))
    result = ctxleak.influence(llama_lm, str(spans), max_new_tokens=3, min_new_tokens=0,
                               progress=False, output=str(tmp_path / "run"))
    return spans, result


def test_each_trace_becomes_an_annotation_on_its_llm_span(measured):
    spans, result = measured
    frame = phoenix_annotations(result.records, spans)
    assert list(frame.index) == ["t1-llm", "t2-llm"]
    for span_id, record in zip(frame.index, result.records):
        row = frame.loc[span_id]
        assert row["metadata"]["trace_id"] == record["id"]
        assert row["metadata"]["influence"] == pytest.approx(record["influence"], abs=1e-6)
        above = record["influence_above_control"]
        assert (row["score"] is None) == (above is None)
        if above is not None:
            assert row["score"] == pytest.approx(above, abs=1e-6)
        assert row["label"] in {"copied", "above control", "within control", "no control"}
        assert f"{record['influence']:.4g} nats" in row["explanation"]
        # no document text is written, only ids and figures
        assert "paris" not in row["explanation"] and "italy" not in json.dumps(row["metadata"])
    # the two traces share no document: each is the other's control, and is scored against it
    assert all(score is not None for score in frame["score"])


def test_the_real_phoenix_client_sends_them(measured):
    pytest.importorskip("phoenix.client")
    from phoenix.client import Client

    spans, result = measured
    sent = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, request.url.path, dict(request.url.params),
                     json.loads(request.content)))
        data = json.loads(request.content)["data"]
        return httpx.Response(200, json={"data": [{"id": f"a{i}"} for i in range(len(data))]})

    client = Client(http_client=httpx.Client(base_url="http://phoenix.test",
                                             transport=httpx.MockTransport(answer)))
    inserted = log_to_phoenix(result.records, spans, client=client)
    assert [i["id"] for i in inserted] == ["a0", "a1"]
    (method, path, params, body), = sent
    assert (method, path, params) == ("POST", "/v1/span_annotations", {"sync": "true"})
    assert [a["span_id"] for a in body["data"]] == ["t1-llm", "t2-llm"]
    assert {a["name"] for a in body["data"]} == {ANNOTATION}
    assert {a["annotator_kind"] for a in body["data"]} == {"CODE"}
    first = body["data"][0]["result"]
    assert first["label"] == phoenix_annotations(result.records, spans).iloc[0]["label"]


def test_a_trace_without_an_answer_span_is_named(tmp_path):
    spans = tmp_path / "spans.jsonl"
    spans.write_text("".join(json.dumps(s) + "\n" for s in
                             _trace("t9", QUERY, "x", DOCS, llm=False)[1:]))
    assert annotated_spans(spans) == {}
    with pytest.raises(InputError, match="trace 't9' has no LLM or root span"):
        phoenix_annotations([{"id": "t9", "influence": 0.0}], spans)
    spans.write_text("{not json\n")
    with pytest.raises(InputError, match="spans.jsonl:1"):
        annotated_spans(spans)
