"""A RAG app answered through an endpoint: the retrieved documents sent as ctxleak serve's marked
context (and through the real proxy on a tiny model the answer is CID's on the documents in
retrieval order, with the question's own seed), or inline in the app's prompt; a failure keeps
the answers had, with their documents."""

from __future__ import annotations

import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.fake_chat import Reply, echo, fake_chat
from helpers.proxy_server import serving_sqlite
from helpers.tiny_models import tiny_llama

from ctxleak.errors import ConfigError
from ctxleak.methods.influence.data import load_examples, prompt_parts
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.targets.base import TargetError
from ctxleak.targets.endpoint_answerer import EndpointAnswerer
from ctxleak.targets.model_answerer import question_seed
from ctxleak.targets.rag import RAGApp

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "acct-9", "text": "the doctor said the capital of italy is rome"},
        {"id": "news-1", "text": "the news report said berlin is a city in germany"}]
QUESTION = "what is the name of the patient ?"


def test_documents_go_as_marked_context_with_the_question_alone():
    with fake_chat() as server:
        answerer = EndpointAnswerer(server.url, "m", ctxleak={"epsilon": 2}, seed=4,
                                    system="be brief", max_tokens=9)
        app = RAGApp(DOCS, answerer=answerer, top_k=2)
        got = app.answer([QUESTION, "where is rome ?"])
    assert [a.text for a in got] == ["answer: " + QUESTION, "answer: where is rome ?"]
    first, second = sorted(server.bodies(), key=lambda b: b["messages"][-1]["content"] != QUESTION)
    assert first["messages"] == [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": QUESTION}]
    marked = first["ctxleak"]
    assert marked["epsilon"] == 2
    assert [d["id"] for d in marked["documents"]] == list(got[0].document_ids)
    assert [d["text"] for d in marked["documents"]] == list(got[0].documents)
    assert first["temperature"] == 1.0 and first["max_tokens"] == 9
    # no seed to ctxleak serve by default: it draws a DP answer's noise itself
    assert "seed" not in first and "seed" not in second
    assert "epsilon 2" in answerer.describe()
    with fake_chat() as server:
        seeded = EndpointAnswerer(server.url, "m", ctxleak={"epsilon": 2}, seed=4, seeded=True)
        RAGApp(DOCS, answerer=seeded, top_k=2).answer([QUESTION, "where is rome ?"])
        bodies = sorted(server.bodies(), key=lambda b: b["messages"][-1]["content"] != QUESTION)
    assert [b["seed"] for b in bodies] == [question_seed(4, QUESTION),
                                           question_seed(4, "where is rome ?")]


def test_inline_documents_fill_the_app_prompt():
    with fake_chat() as server:
        answerer = EndpointAnswerer(server.url, "m", context="inline")
        app = RAGApp(DOCS, answerer=answerer, top_k=1,
                     prompt=[{"role": "system", "content": "docs: {context}"},
                             {"role": "user", "content": "q: {query}"}])
        [got] = app.answer(["where is rome ?"])
    [body] = server.bodies()
    assert got.document_ids == ("acct-9",)
    assert body["messages"] == [{"role": "system", "content": "docs: " + DOCS[1]["text"]},
                                {"role": "user", "content": "q: where is rome ?"}]
    assert "ctxleak" not in body and body["temperature"] == 0.0
    assert answerer.fingerprint() != EndpointAnswerer(server.url, "m").fingerprint()


def test_a_failure_keeps_the_answers_had_with_their_documents():
    def reply(body, headers):
        if "rome" in body["messages"][-1]["content"]:
            return Reply(400, {"error": {"message": "nope"}})
        return echo(body, headers)

    with fake_chat(reply) as server:
        app = RAGApp(DOCS, answerer=EndpointAnswerer(server.url, "m", concurrency=1), top_k=2)
        with pytest.raises(TargetError, match=r"question 2 \('where is rome \?'\): HTTP 400"
                           ) as err:
            app.answer([QUESTION, "where is rome ?"])
    kept = err.value.answered[0]
    assert kept.text == "answer: " + QUESTION and kept.document_ids[0] == "acct-7"
    assert len(kept.documents) == 2


@pytest.mark.parametrize("kw, param", [({"context": "elsewhere"}, "context"),
                                       ({"context": "inline", "ctxleak": {"lambda": 0}},
                                        "ctxleak"),
                                       ({"ctxleak": {"documents": []}}, "ctxleak")])
def test_bad_answerer_settings(kw, param):
    with pytest.raises(ConfigError) as err:
        EndpointAnswerer("http://127.0.0.1:1/v1", "m", **kw)
    assert err.value.param == param


def test_through_ctxleak_serve_the_answer_is_cid_on_the_retrieved_documents(tmp_path):
    lm = tiny_llama()
    # the answerer sends each question's seed here (seeded): a DP answer takes it only from a
    # proxy started for an audit; by default it sends none to ctxleak serve (the bounded one)
    with serving_sqlite(lm, tmp_path / "ledger.db", audit_seeds=True) as (url, _, _):
        answerer = EndpointAnswerer(url + "/v1", "tiny", ctxleak={"lambda": 0.5}, seed=2,
                                    max_tokens=8, seeded=True)
        app = RAGApp(DOCS, answerer=answerer, top_k=2)
        [got] = app.answer([QUESTION])
        bounded = RAGApp(DOCS, answerer=EndpointAnswerer(url + "/v1", "tiny",
                                                         ctxleak={"epsilon": 2.0},
                                                         max_tokens=8), top_k=2)
        assert isinstance(bounded.answer([QUESTION])[0].text, str)
    retrieved = [d for i in got.document_ids for d in DOCS if d["id"] == i]
    example = load_examples([{"id": "q", "query": QUESTION, "documents": retrieved}])[0]
    parts = prompt_parts(lm, example, reserve=8)[0]
    want = cid_ledger(lm, parts.full, parts.empty,
                        CIDConfig(lam=0.5, temperature=1.0, max_new_tokens=8, min_new_tokens=0),
                        seed=question_seed(2, QUESTION))
    assert got.text == lm.decode(want.response_ids)


def test_a_spent_privacy_budget_is_not_retried(tmp_path):
    from ctxleak.proxy import Budgets

    lm = tiny_llama()
    with serving_sqlite(lm, tmp_path / "ledger.db", budgets=Budgets(default=0.0),
                        on_exhausted="refuse", audit_seeds=True) as (url, _, _):
        answerer = EndpointAnswerer(url + "/v1", "tiny", ctxleak={"epsilon": 0.5},
                                    max_tokens=4, retries=3, backoff_s=30.0)
        with pytest.raises(TargetError, match="budget that waiting does not restore "
                           r"\(not retried\).*is spent") as err:
            RAGApp(DOCS, answerer=answerer, top_k=2).answer([QUESTION])
    assert err.value.index == 0 and "\n" not in str(err.value)
