"""Public documents under every mechanism of the privacy proxy (issue 81, item 3): part of the
prompt (CID's "without the documents" side, the votes' no-retrieval stream and DP-RAG's prior
included), never bounded, never charged, never in the ledger; over a datastore, the question's
best public documents are retrieved into every prompt and the mechanism answers over the
private ones."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from typing import Any

import httpx
import pytest
from helpers.proxy_server import chat_body, serving_sqlite

from ctxleak.mitigations.bm25 import BM25
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.prompts import template_prompt
from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.answering import prepare
from ctxleak.proxy.held import flag_public
from ctxleak.proxy.request import parse_request

DOCS = [{"id": "faq-2", "text": "the doctor said the capital of italy is rome"},
        {"id": "faq-3", "text": "the clinic opens at nine on monday"},
        {"id": "acct-7", "text": "the patient name is paris and the phone is one two three"}]
CLASSES = {"faq-2": "public", "faq-3": "public", "acct-7": "restricted"}
QUESTION = "what is the capital of italy ?"


def parsed(marked: dict[str, Any], config: ProxyConfig | None = None, **body: Any) -> Any:
    return parse_request({"model": "tiny", "messages": [{"role": "user", "content": QUESTION}],
                          "ctxleak": marked, **body}, config or ProxyConfig())


def answer(lm: Any, marked: dict[str, Any], public: tuple[str, ...], seed: int) -> Any:
    """The proxy's answer of ``marked`` (its documents ``public`` flagged as the charging flags
    them), seeded through the parsed request (no client seed on the wire), and its prepared
    request."""
    request = replace(parsed(marked, max_tokens=8, temperature=1.0), seed=seed)
    prepared = prepare(lm, request, flag_public(request.documents, public))
    [out] = prepared.mechanism.answer_group(lm, [prepared.asked])
    return out, prepared


def test_bounded_cid_over_public_documents_is_plain_decoding(lm):
    """Bounded CID at ε = 0.05 per token over two public documents draws, for every seed, the
    very tokens of plain decoding (CID at λ = 1) of the same documents as private ones: its
    "without" prompt holds them, so each step's mixture is the full-context distribution."""
    public = [DOCS[0], DOCS[1]]
    for seed in range(4):
        bounded, prepared = answer(lm, {"documents": public, "epsilon": 0.05},
                                   ("faq-2", "faq-3"), seed)
        plain, _ = answer(lm, {"documents": public, "lambda": 1.0}, (), seed)
        assert bounded.response_ids == plain.response_ids
        assert prepared.request.documents == () and prepared.request.ids == ()
        assert prepared.request.prompt([]) == prepared.request.prompt(())
        assert all(e.lam == 1.0 for e in bounded.ledger.entries)
    # with the documents private, bounded CID at this ε holds λ_t near 0: other tokens
    private, _ = answer(lm, {"documents": public, "epsilon": 0.05}, (), 0)
    assert max(e.lam for e in private.ledger.entries) < 0.5


def test_a_mixed_request_is_bounded_only_for_its_private_documents(lm):
    """The mechanism's documents are the private one only; its "without" prompt is the
    template holding the two public documents, its "with" prompt the public ones then the
    private one."""
    _, prepared = answer(lm, {"documents": DOCS, "epsilon": 0.05}, ("faq-2", "faq-3"), 3)
    asked = prepared.request
    assert asked.documents == (DOCS[2]["text"],) and asked.ids == ("acct-7",)
    template = template_prompt(lm, QUESTION, reserve=8)
    assert asked.prompt([]) == template([DOCS[0]["text"], DOCS[1]["text"]])
    assert asked.prompt(asked.documents) == template([d["text"] for d in DOCS])
    # a private document listed before a public one: the public one still comes first
    _, prepared = answer(lm, {"documents": DOCS[::-1], "epsilon": 0.05}, ("faq-2", "faq-3"), 3)
    assert prepared.request.prompt([]) == template([DOCS[1]["text"], DOCS[0]["text"]])


def test_public_documents_never_reach_the_ledger_under_any_charge(lm, tmp_path):
    """Plain CID (uncharged, its ex-post ε recorded), bounded CID and a DP vote: the public
    documents are used and never written to the ledger (before the fix, plain CID wrote them
    with class None and their ex-post ε); the private one is charged alone."""
    with serving_sqlite(lm, tmp_path / "l.db", classes=CLASSES,
                        budgets=Budgets(classes={"restricted": 50.0}),
                        unguaranteed="use", allow_any_mechanism=True) as (url, ledger, _):
        for marked in ({"lambda": 0.5}, {"epsilon": 0.05},
                       {"mechanism": "dp-vote:eps=2,shards=3"}):
            docs = DOCS if "mechanism" not in marked else \
                DOCS + [{"id": f"acct-{k}", "text": f"note {k} of the patient"} for k in (8, 9)]
            resp = httpx.post(url + "/v1/chat/completions", timeout=120, json=chat_body(
                {"documents": docs, **marked}, QUESTION, max_tokens=4, temperature=1.0))
            assert resp.status_code == 200, resp.text
            assert ledger.find("faq-2") is None and ledger.find("faq-3") is None, marked
        assert ledger.find("acct-7").doc_class == "restricted"
        assert ledger.find("acct-7").spent > 0
        # two public and one private document: a vote of 3 shards has too few to deal
        resp = httpx.post(url + "/v1/chat/completions", timeout=120, json=chat_body(
            {"documents": DOCS, "mechanism": "dp-vote:eps=2,shards=3"}, QUESTION))
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "ctxleak.documents"
        assert "needs at least 3 private documents, the request has 1 (2 public" \
            in resp.json()["error"]["message"]


def test_the_bundled_classes_follow_the_datastores_facts():
    config = ProxyConfig(classes="demo-datastore")
    root = resources.files("ctxleak") / "data" / "demo" / "datastore"
    facts = {row["id"]: row["fact"] for row in map(json.loads, (root / "documents.jsonl")
                                                   .read_text().splitlines())}
    assert len(config.classes) == len(facts) == 288
    assert {d: {"common": "public", "private": "restricted"}[f] for d, f in facts.items()} \
        == dict(config.classes)
    assert sum(c == "public" for c in config.classes.values()) == 240
    with pytest.raises(Exception, match="public_top_k"):
        ProxyConfig(public_top_k=-1)


def test_over_the_datastore_public_documents_are_retrieved_into_every_prompt(lm):
    """``demo-datastore`` with its classes: the mechanism's datastore is the 48 restricted
    documents, and every prompt (the votes' no-retrieval one included) starts with the
    question's best two public documents by BM25 over the 240 public ones alone."""
    config = ProxyConfig(datastore="demo-datastore", classes="demo-datastore",
                         mechanism="dp-sparse-vote:eps=2,shards=4")
    question = "Which town is the haulier's head office in?"
    body = {"model": "tiny", "messages": [{"role": "user", "content": question}],
            "max_tokens": 6}
    request = parse_request(body, config)
    public = tuple(i for i, c in config.classes.items() if c == "public")
    prepared = prepare(lm, request, flag_public(request.documents, public))
    store = prepared.request.datastore
    assert isinstance(store, Datastore) and len(store) == 48
    assert all(config.classes[i] == "restricted" for i, _ in store.documents)
    pairs = [(i, t) for i, t in config.datastore.documents if config.classes[i] == "public"]
    best = [pairs[i][1] for i, _ in BM25(tuple(pairs)).search(question, 2)]
    template = template_prompt(lm, question, reserve=6)
    assert prepared.request.prompt([]) == template(best)
    assert prepared.request.prompt(["x y"]) == template([*best, "x y"])
    # public_top_k 0: no public document in the prompt
    none = prepare(lm, replace(request, public_top_k=0),
                   flag_public(request.documents, public))
    assert none.request.prompt([]) == template([])


def test_over_the_datastore_only_private_documents_are_charged(lm, tmp_path):
    """A served sparse vote over ``demo-datastore``: the ledger holds the 48 restricted
    documents, none charged above the answer's claim, and no public one."""
    with serving_sqlite(lm, tmp_path / "l.db", datastore="demo-datastore",
                        classes="demo-datastore", mechanism="dp-sparse-vote:eps=2,shards=4",
                        budgets=Budgets(classes={"restricted": 10.0})) as (url, ledger, _):
        resp = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "model": "tiny", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Where is the recycling centre?"}]})
        assert resp.status_code == 200, resp.text
        rows = ledger.documents(limit=1000)
    # each document a voter reads charged the claim, ε = 2 (individual accounting: the others
    # are never written), and no public document
    assert 1 <= len(rows) <= 4 and {r.doc_class for r in rows} == {"restricted"}
    assert [r.spent for r in rows] == pytest.approx([2.0] * len(rows))


def test_serve_takes_the_bundled_classes_and_public_top_k(monkeypatch, tmp_path, capsys):
    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: None)
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    with pytest.raises(SystemExit) as ok:
        main(["serve", "--ledger", str(tmp_path / "l.db"), "--mechanism", "dp-rag:eps=5",
              "--datastore", "demo-datastore", "--classes", "demo-datastore",
              "--public-top-k", "3", "--class-budget", "restricted=10"])
    assert ok.value.code == 0
    config = calls["run"]["config"]
    assert config.public_top_k == 3 and len(config.classes) == 288
    assert "(288 documents, which it retrieves from itself; 48 private: its 240 public ones " \
           "are retrieved into every prompt, 3 per question, and never charged)" \
           in capsys.readouterr().err


def test_the_answer_vote_is_served_over_the_datastore(lm, tmp_path):
    """``ctxleak serve --mechanism dp-answer-vote``: its answer and claim reach the client, and
    each restricted document a voter reads is charged the claim, ε = 2, no public one."""
    with serving_sqlite(lm, tmp_path / "l.db", datastore="demo-datastore",
                        classes="demo-datastore", mechanism="dp-answer-vote:eps=2,shards=4",
                        budgets=Budgets(classes={"restricted": 10.0})) as (url, ledger, _):
        resp = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "model": "tiny", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Where is the recycling centre?"}]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["ctxleak"]["mechanism"].startswith("dp-answer-vote(eps=2,")
        rows = ledger.documents(limit=1000)
    assert 1 <= len(rows) <= 4 and {r.doc_class for r in rows} == {"restricted"}
    assert [r.spent for r in rows] == pytest.approx([2.0] * len(rows))
