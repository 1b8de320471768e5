"""An answer of ``ctxleak serve`` carries the claim it was released under, read from its
``ctxleak`` field (docs/deploy-cid.md): by hand for each mode, through the chat endpoint target
and the RAG app's endpoint answerer, kept by the journal (and an answer without one stored as
before), an unreadable field a clear error naming the question; the attacks' reports turn the
answers' claims into a claim per document where it covers one."""

from __future__ import annotations

import json

import pytest
from helpers.fake_chat import Reply, completion, fake_chat

from ctxleak.methods.attacks.attack_method import answers_claim, document_eps
from ctxleak.mitigations.mechanisms import RELATIONS, Claim
from ctxleak.targets.base import TargetAnswer, TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget, served_claim
from ctxleak.targets.endpoint_answerer import EndpointAnswerer
from ctxleak.targets.journal import answer_from_json, answer_json
from ctxleak.targets.rag import RAGApp

VOTE = {"mode": "mechanism", "epsilon": 2.0, "delta": 1e-4, "relation": "shard", "tokens": 5}


def test_the_claim_of_each_kind_of_answer_by_hand():
    assert served_claim(VOTE) == Claim(2.0, 1e-4, "shard")
    assert served_claim({"mode": "mechanism", "epsilon": None, "delta": 0.0,
                         "relation": "none"}) == Claim(None)  # scrubbing
    # bounded CID: ε per token over the 7 tokens released (the stopping EOS among them)
    assert served_claim({"mode": "bounded", "epsilon": 0.5, "lambda": 1.0,
                         "tokens": 7}) == Claim(3.5, 0.0, "context")
    assert served_claim({"mode": "lambda", "lambda": 0.5, "epsilon": None,
                         "tokens": 3}) == Claim(None)
    assert served_claim({"mode": "lambda", "lambda": 0.0, "tokens": 3}) == \
        Claim(0.0, 0.0, "context")  # λ = 0 never reads the documents
    assert served_claim(None) is None
    for bad in ([], {"mode": "other"}, {"mode": "bounded", "epsilon": 0.5},
                {"mode": "mechanism", "epsilon": 1.0, "relation": "none"}):
        with pytest.raises(ValueError):
            served_claim(bad)


def test_the_endpoint_target_and_the_rag_answerer_carry_the_claim():
    def reply(body, headers):
        return Reply(body={**completion("ok"), "ctxleak": VOTE})

    with fake_chat(reply) as server:
        [plain] = ChatEndpointTarget(server.url, "m").answer(["q ?"])
        app = RAGApp([{"id": "a", "text": "one"}, {"id": "b", "text": "two"}],
                     answerer=EndpointAnswerer(server.url, "m"), top_k=2)
        [rag] = app.answer(["one ?"])
    assert plain == TargetAnswer("ok", claim=Claim(2.0, 1e-4, "shard"))
    assert rag.claim == Claim(2.0, 1e-4, "shard") and rag.document_ids == ("a", "b")
    with fake_chat() as server:  # a plain endpoint says nothing
        assert ChatEndpointTarget(server.url, "m").answer(["q ?"])[0].claim is None


def test_an_unreadable_claim_is_an_error_naming_the_question():
    def reply(body, headers):
        return Reply(body={**completion("ok"), "ctxleak": {"mode": "bounded"}})

    with fake_chat(reply) as server, \
            pytest.raises(TargetError, match=r"question 1 \('q \?'\).*claim cannot be read"):
        ChatEndpointTarget(server.url, "m").answer(["q ?"])


def test_the_journal_keeps_the_claim_and_stores_an_answer_without_one_as_before():
    answer = TargetAnswer("ok", ("a",), ("one",), Claim(2.0, 1e-4, "shard"))
    assert answer_from_json(answer_json(answer)) == answer
    assert json.loads(answer_json(answer))["claim"] == {"eps": 2.0, "delta": 1e-4,
                                                        "relation": "shard"}
    plain = TargetAnswer("ok", ("a",), ("one",))
    assert answer_json(plain) == json.dumps({"document_ids": ["a"], "documents": ["one"],
                                             "text": "ok"}, ensure_ascii=False)
    assert answer_from_json(answer_json(plain)) == plain


def test_the_reports_claim_by_hand():
    records = [{"claim_eps": 1.0, "claim_delta": 0.0, "claim_relation": "context"},
               {"claim_eps": 1.5, "claim_delta": 0.0, "claim_relation": "context"}, {}]
    assert answers_claim(records) == {"relation": "context", "covers": RELATIONS["context"],
                                      "eps_max": 1.5, "delta": 0.0, "answers": 2, "of": 3}
    mixed = [{"claim_eps": None, "claim_delta": 0.0, "claim_relation": "none"},
             {"claim_eps": 2.0, "claim_delta": 1e-4, "claim_relation": "shard"}]
    got = answers_claim(mixed)
    assert got is not None and got["relation"] == "mixed" and got["eps_max"] is None
    assert got["delta"] == 1e-4 and answers_claim([{}]) is None
    # per document: ε × queries where a pure claim covers a document, else none
    assert document_eps(1.5, 0.0, "context", 3) == 4.5
    assert document_eps(1.5, 0.0, "document", 1) == 1.5
    assert document_eps(1.5, 1e-5, "document", 1) is None
    assert document_eps(2.0, 0.0, "shard", 1) is None
    assert document_eps(None, 0.0, "none", 1) is None
