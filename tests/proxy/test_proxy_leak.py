"""What leaves the privacy proxy towards a client under a DP claim (issue 81): for DP-RAG, the DP
vote and the sparse vote over a datastore, and bounded CID, no response body, header, streamed
chunk or error names a datastore id or its size, a per-document charge or the seed; a client's
seed is refused unless the operator audits, whose answers say their guarantee is void; the
operator fixes what a client may choose (one listing per document, the mechanisms allowed,
bounds on documents and prompt streams, checked before anything is reserved or decoded); the
ledger's documents are the operator's."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from helpers.proxy_server import chat_body, serving_sqlite

from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.proxy import Budgets, ProxyConfig

#: 17 documents whose ids the tiny model cannot write (upper case and digits)
STORE = Datastore.of([(f"ZQ{k:02d}X", f"note {k} the capital of italy is rome and {w}")
                      for k, w in enumerate("paris tiber monday phone clinic doctor anna "
                                            "nurse river city pope sun rain snow wind sea "
                                            "hill".split())])
SIZE = len(STORE)
QUESTION = "what is the capital of italy ?"
DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "acct-9", "text": "the doctor said the capital of italy is rome"}]
SPECS = ["dp-rag:eps=5", "dp-vote:eps=2,shards=4", "dp-sparse-vote:eps=2,shards=4"]


def post(url: str, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=120, headers=headers,
                      json=chat_body(None, QUESTION, **{"temperature": 0.8, "max_tokens": 6,
                                                        **body}))


def everything(resp: httpx.Response) -> str:
    """The whole response as a client sees it: status, headers and body (every chunk)."""
    return f"{resp.status_code}\n{json.dumps(dict(resp.headers))}\n{resp.text}"


def figures(resp: httpx.Response) -> list[str]:
    """The ``ctxleak`` field's values (of the body or the stream's last chunk), the headers'
    and the error's message, as text: where a datastore's size could be said (the tokens
    left out: they are the answer)."""
    out = [v for k, v in resp.headers.items() if k.startswith("x-ctxleak")]
    for line in resp.text.splitlines() if resp.text.startswith("data:") else [resp.text]:
        line = line.removeprefix("data: ")
        if line.startswith("{"):
            body = json.loads(line)
            info = {k: v for k, v in (body.get("ctxleak") or {}).items() if k != "token_ids"}
            out += [json.dumps(info), json.dumps(body.get("error"))]
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_nothing_of_the_datastore_reaches_a_client(lm, tmp_path, spec):
    budgets = Budgets(default=30.0, overrides={"ZQ03X": 0.0})  # one spent: left out
    with serving_sqlite(lm, tmp_path / "l.db", mechanism=spec, datastore=STORE,
                        budgets=budgets, on_exhausted="refuse", on_unfittable="refuse",
                        allow_any_mechanism=True) as (url, ledger, _):
        answered = [post(url), post(url, stream=True)]
        assert [r.status_code for r in answered] == [200, 200], answered[0].text
        refused = [post(url, seed=5),  # the noise is the server's
                   post(url, ctxleak={"documents": DOCS}),  # its datastore only
                   post(url, ctxleak={"mechanism": "dp-vote:eps=2,shards=30"}),  # > 17
                   post(url, ctxleak={"mechanism": "dp-vote:eps=2,shards=90"})]  # > streams
        assert [r.status_code for r in refused] == [400] * 4, [r.text for r in refused]
        info = answered[0].json()["ctxleak"]
        # the claim and the caller's own figures, nothing else
        assert set(info) <= {"mode", "mechanism", "epsilon", "delta", "relation", "guarantee",
                             "epsilon_spent", "delta_spent", "seed_known", "token_ids",
                             "tokens", "stopped_on_eos", "temperature", "warnings"}
        assert info["seed_known"] is False and "AUDIT" not in info["guarantee"]
        for doc_id, _ in STORE.documents:
            assert all(doc_id not in everything(r) for r in answered + refused), doc_id
        for text in (t for r in answered + refused for t in figures(r)):
            assert not re.search(rf"\b{SIZE}\b", text), text
        assert ledger.document("ZQ05X").spent > 0  # the operator's ledger has it all
        assert ledger.document("ZQ03X").spent == 0


def test_a_bounded_cid_answer_echoes_only_the_clients_own_documents(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", budgets=Budgets(default=30.0)) as (url, _, _):
        marked = {"documents": DOCS, "epsilon": 0.5}
        for resp in (post(url, ctxleak=marked), post(url, ctxleak=marked, stream=True)):
            assert resp.status_code == 200, resp.text
            text = everything(resp)
            for hidden in ("charged", "budgets", "lambdas", "influence", "epsilon_ex_post",
                           "x-ctxleak-epsilon-reserved", '"seed"'):
                assert hidden not in text, hidden
            assert json.loads(resp.headers["x-ctxleak-documents"]) == ["acct-7", "acct-9"]
        plain = post(url, ctxleak={"documents": DOCS[:1], "lambda": 0.5}, seed=3)
        assert plain.status_code == 403  # budgeted, no guarantee: as before


def test_a_client_seed_is_refused_unless_the_operator_audits(lm, tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    with serving_sqlite(lm, tmp_path / "l.db", mechanism="dp-rag:eps=5") as (url, ledger, _):
        for marked in ({}, {"epsilon": 0.5}):
            bad = post(url, ctxleak={"documents": DOCS, **marked}, seed=7)
            error = bad.json()["error"]
            assert bad.status_code == 400 and error["param"] == "seed"
            assert error["code"] == "seed_not_allowed" and "--audit-seeds" in error["message"]
        assert ledger.count() == 0  # nothing reserved
        assert post(url, ctxleak={"documents": DOCS, "lambda": 0.5}, seed=7).status_code == 200
        for _ in range(2):
            assert post(url, ctxleak={"documents": DOCS}).status_code == 200
    seeds = [json.loads(r.getMessage()).get("seed") for r in caplog.records
             if r.name == "ctxleak.proxy" and '"event": "mechanism"' in r.getMessage()]
    assert len(seeds) == 2 and seeds[0] != seeds[1]  # a fresh server secret per answer
    with serving_sqlite(lm, tmp_path / "a.db", mechanism="dp-rag:eps=5",
                        audit_seeds=True) as (url, _, _):
        audited = [post(url, ctxleak={"documents": DOCS}, seed=7) for _ in range(2)]
        info = audited[0].json()["ctxleak"]
        assert info["seed_known"] is True and info["seed"] == 7
        assert info["guarantee"].startswith("AUDIT: the client chose the seed, so this "
                                            "answer's noise is known to it and its DP "
                                            "guarantee is void")
        assert audited[0].headers["x-ctxleak-seed-known"] == "true"
        assert audited[1].json()["ctxleak"]["token_ids"] == info["token_ids"]
        unseeded = post(url, ctxleak={"documents": DOCS}).json()["ctxleak"]
        assert unseeded["seed_known"] is False and "seed" not in unseeded


def test_a_document_listed_twice_is_refused(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", mechanism="dp-vote:eps=1,shards=3") as (url,
                                                                                       ledger,
                                                                                       _):
        for twin in (DOCS[0], {**DOCS[0], "text": "another text"}):
            bad = post(url, ctxleak={"documents": [*DOCS, twin]})
            error = bad.json()["error"]
            assert bad.status_code == 400 and error["code"] == "duplicate_document"
            assert error["param"] == "ctxleak.documents[2].id"
        assert ledger.count() == 0


def test_the_mechanisms_a_client_may_name_are_the_operators(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", mechanism="dp-rag:eps=5",
                        allowed_mechanisms=["dp-vote:eps=2,shards=3"]) as (url, _, _):
        bad = post(url, ctxleak={"documents": DOCS, "mechanism": "dp-rag:eps=50"})
        error = bad.json()["error"]
        assert bad.status_code == 400 and error["code"] == "mechanism_not_allowed"
        assert "dp-rag(eps=5,delta=0.001), dp-vote(eps=2,shards=3" in error["message"]
        three = [*DOCS, {"id": "acct-11", "text": "the nurse is called anna"}]
        for named in ({"name": "dp-vote", "shards": 3, "eps": 2}, "dp-rag:eps=5"):  # by key
            assert post(url, ctxleak={"documents": three, "mechanism": named}).status_code == 200
        assert post(url, ctxleak={"documents": DOCS, "epsilon": 0.5}).status_code == 200
    with serving_sqlite(lm, tmp_path / "m.db", mechanism="dp-rag:eps=5",
                        allow_any_mechanism=True) as (url, _, _):
        assert post(url, ctxleak={"documents": DOCS, "mechanism": "dp-rag:eps=50"}
                    ).status_code == 200
    with pytest.raises(ConfigError, match="allowed_mechanisms: no mechanism named 'dp-nothing'"):
        ProxyConfig(allowed_mechanisms=["dp-nothing"])


def test_a_request_past_a_bound_is_refused_before_anything_is_decoded(lm, tmp_path):
    big = Datastore.of([(f"d{k}", f"w{k % 7} x") for k in range(2000)])
    with serving_sqlite(lm, tmp_path / "l.db", mechanism="dp-rag:eps=5", datastore=big,
                        allow_any_mechanism=True) as (url, ledger, app):
        proxy, calls = app.state.proxy, []
        real = proxy._answer
        proxy._answer = lambda *a: calls.append(1) or real(*a)  # counts every decoding
        bad = post(url, ctxleak={"mechanism": "dp-vote:eps=1,shards=2000"})
        error = bad.json()["error"]
        assert bad.status_code == 400 and error["code"] == "over_limit"
        assert error["param"] == "ctxleak.mechanism" and "max_streams of 64" in error["message"]
        assert "2001 prompt streams" in error["message"]
        assert calls == [] and ledger.count() == 0  # nothing decoded, nothing reserved
    with serving_sqlite(lm, tmp_path / "m.db", max_documents=3) as (url, _, _):
        docs = [{"id": f"n{k}", "text": "a note"} for k in range(4)]
        bad = post(url, ctxleak={"documents": docs, "lambda": 0.5})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "over_limit"
        assert bad.json()["error"]["param"] == "ctxleak.documents"
    with pytest.raises(ConfigError, match="max_streams: dp-vote"):
        ProxyConfig(mechanism="dp-vote:eps=1,shards=100")
    assert ProxyConfig(mechanism="dp-vote:eps=1,shards=100", max_streams=101).max_streams == 101


def test_the_ledgers_documents_are_the_operators(lm, tmp_path):
    budgets = Budgets(default=30.0)
    with serving_sqlite(lm, tmp_path / "l.db", budgets=budgets, api_key="k") as (url, _, _):
        key = {"authorization": "Bearer k"}
        assert post(url, key, ctxleak={"documents": DOCS, "epsilon": 0.5}).status_code == 200
        refused = httpx.get(url + "/v1/ctxleak/documents/acct-7", headers=key)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "operator_key_not_configured"
        assert "--operator-key-env" in refused.json()["error"]["message"]
        scrape = httpx.get(url + "/metrics").text
        assert "acct-7" not in scrape and "ctxleak_proxy_ledger_documents" not in scrape
        assert 'ctxleak_proxy_requests_total{route="chat",status="200"} 1.0' in scrape
    with serving_sqlite(lm, tmp_path / "m.db", budgets=budgets, api_key="k",
                        operator_api_key="op") as (url, ledger, _):
        ledger.reserve("r", ["acct-7"], 1.0, budgets)
        op = {"authorization": "Bearer op"}
        assert httpx.get(url + "/v1/ctxleak/documents/acct-7", headers=op).status_code == 200
        assert 'document="acct-7"' in httpx.get(url + "/metrics", headers=op).text
        assert 'document="acct-7"' not in httpx.get(url + "/metrics", headers={
            "authorization": "Bearer k"}).text
    with serving_sqlite(lm, tmp_path / "n.db") as (url, _, _):  # keyless: a development proxy
        assert httpx.get(url + "/v1/ctxleak/documents").status_code == 200


def test_serve_takes_the_operators_bounds(monkeypatch, tmp_path):
    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: None)
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    monkeypatch.setenv("OPKEY", "op-secret")
    with pytest.raises(SystemExit) as ok:
        main(["serve", "--ledger", str(tmp_path / "l.db"), "--mechanism", "dp-rag:eps=5",
              "--allow-mechanism", "dp-vote:eps=2,shards=3", "--allow-mechanism",
              "dp-rag:eps=2", "--audit-seeds", "--operator-key-env", "OPKEY",
              "--max-documents", "8", "--max-streams", "16"])
    assert ok.value.code == 0
    config = calls["run"]["config"]
    assert config.allowed_keys()[1:] == ("dp-vote(eps=2,shards=3,delta=0.0001)",
                                         "dp-rag(eps=2,delta=0.001)")
    assert config.audit_seeds and config.operator_api_key == "op-secret"
    assert (config.max_documents, config.max_streams) == (8, 16)
    assert not config.allow_any_mechanism
