"""One small black-box audit against the session's real vLLM server (the default model): the
bundled Northwind RAG app answered by vLLM with its documents inline, extraction and membership
end to end through the real openai client, the run folder read back; then the same app behind
``ctxleak serve`` at bounded ε = 2 (CID decoded through vLLM, the documents as the proxy's
marked context), whose answers the same attack measures, with the claim beside its bound."""

from __future__ import annotations

import pytest
from helpers.proxy_server import serving_sqlite

import ctxleak
from ctxleak.engine.served import serve

pytestmark = pytest.mark.served

#: Small enough for a CPU server: four composite prompts, short answers.
QUERIES, TOKENS = 4, 24


def test_audit_of_the_demo_rag_on_vllm(vllm_server, tmp_path):
    target = ctxleak.attack_target(rag_demo=True, endpoint=vllm_server.url + "/v1",
                                   endpoint_model=vllm_server.served_name,
                                   max_new_tokens=TOKENS, top_k=2)
    extract = ctxleak.attack_extract(target, "demo-rag", queries=QUERIES,
                                     output=str(tmp_path / "extract"), progress=False)
    assert len(extract.records) == QUERIES
    assert all(isinstance(r["answer"], str) and len(r["retrieved"]) == 2
               for r in extract.records)
    assert extract.summary["queries_sent"] == QUERIES
    loaded = ctxleak.load_result(extract.path)
    assert [r["answer"] for r in loaded.records] == [r["answer"] for r in extract.records]
    # the same questions again from the journal: nothing sent, the same answers
    again = ctxleak.attack_extract(target, "demo-rag", queries=QUERIES,
                                   output=str(tmp_path / "extract"), resume=True,
                                   progress=False)
    assert again.summary["queries_sent"] == 0

    membership = ctxleak.attack_membership(target, "demo-rag", attacks=["direct"],
                                           output=str(tmp_path / "membership"),
                                           progress=False)
    members = {r["document_id"] for r in membership.records if r["member"]}
    assert members and {d for r in membership.records for d in r["retrieved"]} <= members
    direct = membership.summary["attacks"]["direct"]
    assert 0.0 <= direct["auc"] <= 1.0 and direct["auc_ci"]["low"] <= direct["auc"]
    assert (membership.path / "report.html").is_file()


def test_audit_through_ctxleak_serve_at_bounded_eps_2(vllm_server, tmp_path):
    lm = serve("default", vllm_server.url, served_model=vllm_server.served_name)
    with serving_sqlite(lm, tmp_path / "ledger.db", upstream=vllm_server.url) as (url, _, _):
        target = ctxleak.attack_target(rag_demo=True, endpoint=url + "/v1",
                                       endpoint_model="smollm2-135m", endpoint_context="ctxleak",
                                       bounded_eps=2.0, max_new_tokens=4, top_k=2)
        result = ctxleak.attack_extract(target, "demo-rag", queries=2,
                                        output=str(tmp_path / "proxy"), progress=False)
    assert len(result.records) == 2
    assert "epsilon 2" in result.summary["target"]
    assert all(isinstance(r["answer"], str) for r in result.records)
