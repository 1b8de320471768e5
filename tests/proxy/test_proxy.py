"""The privacy proxy (ctxleak.proxy) with the real ``openai`` client, in front of a tiny in-process
model: answers equal CID.answer's on the prompts ``ctxleak influence`` builds, the ledger's
numbers, budgets running out (drop, refuse), concurrent clients, pass-through, bad input, and the
operations endpoints."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import httpx
import openai
import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.fake_server import Fault, fake_vllm
from helpers.proxy_server import DOCS, QUESTION, audited, chat_body, openai_client

from ctxleak.engine.served_client import ServerError
from ctxleak.methods.influence.data import load_examples, prompt_parts
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.proxy import Budgets


def ask(url: str, marked: dict[str, Any] | None, **kwargs: Any) -> Any:
    extra = {"extra_body": {"ctxleak": marked}} if marked is not None else {}
    return openai_client(url).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": QUESTION}], **extra, **kwargs)


def influence_parts(lm, docs=DOCS, max_tokens: int = 8):
    """The two prompts ``ctxleak influence`` builds for a row with these documents."""
    example = load_examples([{"id": "q", "query": QUESTION, "documents": docs}])[0]
    return prompt_parts(lm, example, reserve=max_tokens)[0]


def test_lambda_answer_equals_generate_cid_and_streams_the_same(lm, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    with audited(lm, tmp_path) as (url, ledger, _):
        out = ask(url, {"documents": DOCS, "lambda": 0.5}, seed=11, temperature=0.8,
                  max_tokens=8, extra_query=None)
        info = out.model_extra["ctxleak"]
        parts = influence_parts(lm)
        want = cid_ledger(lm, parts.full, parts.empty,
                            CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=8,
                                      min_new_tokens=0), seed=11)
        assert info["token_ids"] == [e.token_id for e in want.entries]
        assert out.choices[0].message.content == lm.decode(want.response_ids)
        assert out.usage.completion_tokens == len(want.response_ids)
        assert out.usage.prompt_tokens == len(parts.full)
        assert info["lambdas"] == [0.5] * len(want.entries)
        assert info["mode"] == "lambda" and info["epsilon_spent"] is None
        assert info["documents"] == ["acct-7", "acct-9"] and info["dropped"] == []
        assert info["epsilon_ex_post"] > 0
        assert info["influence"] == pytest.approx(sum(e.influence for e in want.entries))
        # plain CID records its ex-post ε per document, outside the budget
        for doc in ("acct-7", "acct-9"):
            row = ledger.document(doc)
            assert row.spent == 0 and row.ex_post == pytest.approx(info["epsilon_ex_post"])
        chunks = list(openai_client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
            seed=11, temperature=0.8, max_tokens=8, stream_options={"include_usage": True},
            extra_body={"ctxleak": {"documents": DOCS, "lambda": 0.5}}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == out.choices[0].message.content
        assert chunks[-2].choices[0].finish_reason == out.choices[0].finish_reason
        assert chunks[-2].model_extra["ctxleak"]["token_ids"] == info["token_ids"]
        assert chunks[-1].choices == [] and chunks[-1].usage == out.usage
    # the request log names the documents, never their text nor the question
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ctxleak.proxy"]
    assert [entry["documents"] for entry in logged] == [["acct-7", "acct-9"]] * 2
    assert not any(w in caplog.text for w in ("phone", "patient", "capital", QUESTION))


class Heard:
    """A listener whose tokens go to ``token`` and whose finished answers to ``inner``."""

    def __init__(self, token, inner):
        self.token, self.inner = token, inner

    def done(self, k, answer):
        if self.inner is not None:
            self.inner.done(k, answer)


def test_a_streamed_answer_sends_each_token_as_it_is_drawn(lm, tmp_path, monkeypatch):
    """The first text's chunk reaches the client while decoding is held after its token: a
    stream that waited for the whole answer would never deliver it (the hold times out). While
    it is still decoding, the stream counts against the concurrency limit."""
    from ctxleak.proxy.batching import BatchDecoder

    real, received, timed_out = BatchDecoder.answer, threading.Event(), []

    def held(decoder, request, docs, listener=None):
        def token(k, token_id, spent):
            listener.token(k, token_id, spent)
            # hold the decoding after the first token with text until the client has its chunk
            if not timed_out and lm.decode([token_id]).strip():
                timed_out.append(not received.wait(timeout=20))
        return real(decoder, request, docs, Heard(token, listener))

    monkeypatch.setattr(BatchDecoder, "answer", held)
    with audited(lm, tmp_path, max_concurrent=1, max_queued=0) as (url, _, app):
        stream = openai_client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
            seed=11, temperature=0.8, max_tokens=8,
            extra_body={"ctxleak": {"documents": DOCS, "lambda": 0.5}, "min_tokens": 2})
        chunks, busy = [], None
        for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 2:  # the role, then the first token's text
                busy = httpx.post(url + "/v1/chat/completions",
                                  json=chat_body({"documents": DOCS, "lambda": 0.5}))
                received.set()
        assert timed_out == [False]
        assert busy is not None and busy.status_code == 429
        proxy = app.state.proxy
        for _ in range(200):  # the stream's task gives its slot back once it is decoded
            if proxy._active == 0:
                break
            threading.Event().wait(0.01)
        assert proxy._active == 0 and not proxy._slots.locked()
        ids = chunks[-1].model_extra["ctxleak"]["token_ids"]
        first = next(k for k, t in enumerate(ids) if lm.decode([t]).strip())
        assert chunks[1].choices[0].delta.content == lm.decode(ids[:first + 1])


def test_a_stream_that_fails_midway_charges_the_tokens_it_sent(lm, tmp_path, monkeypatch):
    """Bounded CID: the decoding (its upstream) fails after 3 tokens were sent. The client gets
    an error event and each document is charged ε for each of the 3 tokens, never 0 (they were
    released), never the whole reservation; a failure before any token is an HTTP error
    charging 0."""
    from ctxleak.proxy.batching import BatchDecoder

    real = BatchDecoder.answer
    eps = 0.5

    def failing(after):
        def answer(decoder, request, docs, listener=None):
            drawn = []

            def token(k, token_id, spent):
                if len(drawn) == after:
                    raise ServerError("the model went away")
                drawn.append(token_id)
                if listener is not None:
                    listener.token(k, token_id, spent)
            return real(decoder, request, docs, Heard(token, listener))
        return answer

    monkeypatch.setattr(BatchDecoder, "answer", failing(3))
    with audited(lm, tmp_path) as (url, ledger, _):
        stream = openai_client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
            seed=3, temperature=1.0, max_tokens=8,
            extra_body={"ctxleak": {"documents": DOCS, "epsilon": eps}, "min_tokens": 6})
        with pytest.raises(openai.APIError, match="after 3 token"):
            list(stream)
        for doc in ("acct-7", "acct-9"):
            assert ledger.document(doc).spent == pytest.approx(3 * eps)
        assert ledger.open_reservations() == []
        monkeypatch.setattr(BatchDecoder, "answer", failing(0))
        with pytest.raises(openai.InternalServerError) as caught:
            list(openai_client(url).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
                max_tokens=8, extra_body={"ctxleak": {"documents": DOCS, "epsilon": eps}}))
        assert caught.value.body["code"] == "upstream_failed"
        assert ledger.document("acct-7").spent == pytest.approx(3 * eps)
        assert ledger.open_reservations() == []
        # the ledger fails too while charging the sent tokens: the stream still ends (with an
        # error, not a hang) and the reservation stays open, charged in full
        monkeypatch.setattr(BatchDecoder, "answer", failing(2))
        monkeypatch.setattr(ledger, "settle", lambda *a, **k: 1 / 0)
        with pytest.raises(openai.APIError, match="after 2 token"):
            list(openai_client(url).with_options(timeout=30).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
                seed=3, max_tokens=8, extra_body={"ctxleak": {"documents": DOCS, "epsilon": eps},
                                                  "min_tokens": 6}))
        open_rows = ledger.open_reservations()
        assert len({rid for rid, _, _ in open_rows}) == 1  # this answer's reservation
        assert {(doc, amount) for _, doc, amount in open_rows} == {("acct-7", eps * 9),
                                                                  ("acct-9", eps * 9)}


def test_bounded_answer_ledger_and_budget_drop_then_refuse(lm, tmp_path):
    eps, max_tokens = 0.5, 6
    reservation = eps * (max_tokens + 1)
    # one answer's reservation fits acct-7's budget, not a second (each answer spends >= ε)
    budgets = Budgets(default=10 * reservation, overrides={"acct-7": reservation + eps / 2})
    with audited(lm, tmp_path, budgets=budgets) as (url, ledger, _):
        first = ask(url, {"documents": DOCS, "epsilon": eps}, seed=3, max_tokens=max_tokens,
                    temperature=1.0).model_extra["ctxleak"]
        parts = influence_parts(lm, max_tokens=max_tokens)
        want = cid_ledger(lm, parts.full, parts.empty,
                            CIDConfig(lam=1.0, temperature=1.0, max_new_tokens=max_tokens,
                                      min_new_tokens=0, bounded_eps=eps), seed=3)
        assert first["token_ids"] == [e.token_id for e in want.entries]
        # each λ_t is computed from the documents: outside the claim, never released (issue 81)
        assert "lambdas" not in first and "influence" not in first
        assert first["epsilon_spent"] == pytest.approx(eps * len(want.entries))
        spent = first["epsilon_spent"]
        assert ledger.document("acct-7").spent == pytest.approx(spent)
        assert ledger.document("acct-9").spent == pytest.approx(spent)
        assert ledger.open_reservations() == []
        # acct-7 now has less than one reservation left: dropped, the answer made without it
        second = ask(url, {"documents": DOCS, "epsilon": eps}, seed=3, max_tokens=max_tokens,
                     temperature=1.0).model_extra["ctxleak"]
        assert second["dropped"] == ["acct-7"] and second["documents"] == ["acct-9"]
        only9 = influence_parts(lm, docs=DOCS[1:], max_tokens=max_tokens)
        want9 = cid_ledger(lm, only9.full, only9.empty,
                             CIDConfig(lam=1.0, temperature=1.0, max_new_tokens=max_tokens,
                                       min_new_tokens=0, bounded_eps=eps), seed=3)
        assert second["token_ids"] == [e.token_id for e in want9.entries]
        assert ledger.document("acct-7").spent == pytest.approx(spent)
        assert ledger.document("acct-9").spent == pytest.approx(spent +
                                                                second["epsilon_spent"])
        metrics = httpx.get(url + "/metrics").text
        assert "ctxleak_proxy_documents_dropped_total 1.0" in metrics
        total = spent * 2 + second["epsilon_spent"]
        assert f"ctxleak_proxy_epsilon_spent_total {total}" in metrics
    with audited(lm, tmp_path, budgets=budgets, on_exhausted="refuse") as (url, ledger, _):
        with pytest.raises(openai.RateLimitError) as caught:
            ask(url, {"documents": DOCS, "epsilon": eps}, max_tokens=max_tokens)
        assert caught.value.status_code == 429
        assert caught.value.body["code"] == "budget_exhausted"
        assert "acct-7" in caught.value.body["message"]
        # refusing charges nothing, not even the documents that had budget
        assert ledger.document("acct-9").spent == pytest.approx(spent +
                                                                second["epsilon_spent"])


def test_two_concurrent_clients_never_overspend(lm, tmp_path):
    eps, max_tokens = 0.25, 4
    budget = eps * (max_tokens + 1) + eps / 2  # room for one reservation, not two
    with audited(lm, tmp_path, budgets=Budgets(default=budget)) as (url, ledger, _):
        results: list[Any] = [None] * 4
        barrier = threading.Barrier(4)

        def one(k: int) -> None:
            barrier.wait()
            results[k] = ask(url, {"documents": DOCS[:1], "epsilon": eps}, seed=k,
                             max_tokens=max_tokens).model_extra["ctxleak"]

        threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        served = [r for r in results if r["documents"] == ["acct-7"]]
        assert len(served) == 1
        assert sum(r["dropped"] == ["acct-7"] for r in results) == 3
        assert ledger.document("acct-7").spent == pytest.approx(served[0]["epsilon_spent"])
        assert ledger.document("acct-7").spent <= budget


BAD = [
    ({"documents": DOCS, "lambda": 1.5}, {}, "ctxleak.lambda"),
    ({"documents": DOCS, "lambda": "half"}, {}, "ctxleak.lambda"),
    ({"documents": DOCS, "epsilon": 0}, {}, "ctxleak.epsilon"),
    ({"documents": DOCS, "epsilon": -1.0}, {}, "ctxleak.epsilon"),
    ({"documents": [{"text": "no id here"}], "lambda": 0.5}, {}, "ctxleak.documents[0].id"),
    ({"documents": [DOCS[0], {"id": "x"}], "lambda": 0.5}, {}, "ctxleak.documents[1].text"),
    ({"documents": DOCS}, {}, "ctxleak.lambda"),
    ({"documents": DOCS, "lambda": 0.5, "budget": 3}, {}, "ctxleak.budget"),
    ({"documents": DOCS, "epsilon": 1.0}, {"temperature": 0}, "temperature"),
    ({"documents": DOCS, "lambda": 0.5}, {"max_tokens": 100000}, "max_tokens"),
    ({"documents": DOCS, "lambda": 0.5}, {"n": 2}, "n"),
    ({"documents": DOCS, "lambda": 0.5}, {"stop": ["."]}, "stop"),
    ("acct-7", {}, "ctxleak"),
    (None, {"messages": []}, "messages"),
]


def test_bad_input_names_the_field(lm, tmp_path):
    with audited(lm, tmp_path, budgets=Budgets(default=1.0)) as (url, ledger, _):
        for marked, extra, param in BAD:
            with pytest.raises(openai.BadRequestError) as caught:
                if marked is None:  # marked context, bad messages
                    openai_client(url).chat.completions.create(
                        model="tiny", **extra,
                        extra_body={"ctxleak": {"documents": DOCS, "lambda": 0.5}})
                else:
                    ask(url, marked, **extra)
            assert caught.value.body["param"] == param, (marked, extra)
            assert caught.value.body["message"].startswith(param + ":")
        # nothing was reserved nor spent by a refused request
        assert ledger.open_reservations() == []
        assert ledger.document("acct-7").spent == 0
        resp = httpx.post(url + "/v1/chat/completions", content=b"{not json",
                          headers={"content-type": "application/json"})
        assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
        # a body not sent as JSON (a browser's form or text/plain, which needs no CORS
        # preflight) is not read at all: HTTP 415, nothing reserved
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            resp = httpx.post(url + "/v1/chat/completions", content=json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode(),
                headers={"content-type": kind} if kind else {})
            assert resp.status_code == 415, (kind, resp.text)
            assert resp.json()["error"]["code"] == "unsupported_media_type"
        assert ledger.open_reservations() == []
        # a lost ledger is the proxy's failure: HTTP 500 in the OpenAI shape, nothing decoded
        ledger.close()
        with pytest.raises(openai.InternalServerError) as caught:
            ask(url, {"documents": DOCS, "epsilon": 1.0})
        assert caught.value.status_code == 500 and caught.value.body["code"] == "internal_error"




def test_pass_through_unmarked_and_upstream_errors(lm, tmp_path):
    with fake_vllm(lm) as upstream:
        direct = httpx.post(upstream.url + "/v1/chat/completions",
                            json=chat_body(max_tokens=5)).json()
        upstream.requests.clear()
        with audited(lm, tmp_path, upstream=upstream.url + "/v1") as (url, ledger, _):
            out = ask(url, None, max_tokens=5)
            assert out.choices[0].message.content == direct["choices"][0]["message"]["content"]
            assert "ctxleak" not in (out.model_extra or {})
            [(path, body)] = upstream.requests
            upstream.requests.clear()
            assert path == "/v1/chat/completions"
            assert body == {"model": "tiny", "max_tokens": 5,
                            "messages": [{"role": "user", "content": QUESTION}]}
            # streamed: the upstream's events relayed as they came
            chunks = list(openai_client(url).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=5,
                stream=True))
            assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
                direct["choices"][0]["message"]["content"]
            assert chunks[-1].choices[0].finish_reason == direct["choices"][0]["finish_reason"]
            # an empty list of documents marks nothing: passed on without the ctxleak field
            ask(url, {"documents": []}, max_tokens=5)
            assert "ctxleak" not in upstream.requests[-1][1]
            assert ledger.open_reservations() == []
    # the upstream is gone: 502 in the OpenAI error shape
    with audited(lm, tmp_path, upstream=upstream.url) as (url, _, _):
        with pytest.raises(openai.InternalServerError) as caught:
            ask(url, None, max_tokens=5)
        assert caught.value.status_code == 502
        assert caught.value.body["code"] == "upstream_unreachable"
        assert upstream.url in caught.value.body["message"]
    # slow (504), failing (502 naming its status) or answering what is not JSON (502)
    for fault, status, code in [(Fault("hang"), 504, "upstream_timeout"),
                                (Fault("http", status=503), 502, "upstream_failed"),
                                (Fault("not-json"), 502, "upstream_bad_answer")]:
        with fake_vllm(lm, fault=fault) as bad, \
                audited(lm, tmp_path, upstream=bad.url, upstream_timeout=0.3) as (url, _, _):
            with pytest.raises(openai.APIStatusError) as caught:
                ask(url, None, max_tokens=5)
            assert caught.value.status_code == status
            assert caught.value.body["code"] == code and caught.value.body["type"] == "upstream_error"


def test_operations_key_size_and_concurrency_limits(lm, tmp_path):
    with audited(lm, tmp_path, api_key="s3cret", max_body_bytes=2000,
                 max_concurrent=1, max_queued=1) as (url, _, app):
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        with pytest.raises(openai.AuthenticationError):
            ask(url, {"documents": DOCS, "lambda": 0.5})
        ok = openai_client(url, "s3cret").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=3,
            extra_body={"ctxleak": {"documents": DOCS, "lambda": 0.5}})
        assert ok.model_extra["ctxleak"]["tokens"] <= 3
        big = {"model": "tiny", "messages": [{"role": "user", "content": "a " * 2000}],
               "ctxleak": {"documents": DOCS, "lambda": 0.5}}
        resp = httpx.post(url + "/v1/chat/completions", json=big,
                          headers={"authorization": "Bearer s3cret"})
        assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"
        # one request holds the model, a second waits in the queue, a third is refused (429)
        proxy = app.state.proxy
        proxy._model_lock.acquire()
        held: list[Any] = []

        def asking() -> None:
            held.append(openai_client(url, "s3cret").chat.completions.create(
                model="tiny", max_tokens=2, messages=[{"role": "user", "content": QUESTION}],
                extra_body={"ctxleak": {"documents": DOCS, "lambda": 0.5}}))

        first, second = threading.Thread(target=asking), threading.Thread(target=asking)
        first.start()
        while proxy._active == 0:
            threading.Event().wait(0.005)
        second.start()
        while proxy._queued == 0:
            threading.Event().wait(0.005)
        body = chat_body({"documents": DOCS, "lambda": 0.5})
        resp = httpx.post(url + "/v1/chat/completions", json=body,
                          headers={"authorization": "Bearer s3cret"})
        proxy._model_lock.release()
        first.join(10)
        second.join(10)
        assert resp.status_code == 429 and resp.json()["error"]["code"] == "too_many_requests"
        assert "1 more are waiting" in resp.json()["error"]["message"]
        assert len(held) == 2 and all(h.model_extra["ctxleak"]["tokens"] <= 2 for h in held)
        assert proxy._active == 0 and proxy._queued == 0
        metrics = httpx.get(url + "/metrics").text
        assert 'ctxleak_proxy_requests_total{route="chat",status="429"} 1.0' in metrics
        assert 'ctxleak_proxy_requests_total{route="chat",status="401"} 1.0' in metrics
        assert json.loads(httpx.get(url + "/v1/models", headers={
            "authorization": "Bearer s3cret"}).text)["data"][0]["id"] == "ctxleak-cid"


def test_decoding_through_a_served_model(served, tmp_path):
    """The proxy over a served model (the fake vLLM of the fast tier): at λ = 0.5 it decodes the
    tokens in-process CID decodes from the same seed (every token's log-prob at each step); at
    λ = 1, T = 1 the server samples the answer itself, as ``ctxleak influence`` has it do."""
    from ctxleak.methods.influence.answers import own_answers

    served, upstream = served
    tiny = upstream.lm
    with audited(served, tmp_path, upstream=upstream.url) as (url, ledger, _):
        mixed = ask(url, {"documents": DOCS, "lambda": 0.5}, seed=4, temperature=0.8,
                    max_tokens=4).model_extra["ctxleak"]
        parts = influence_parts(tiny, max_tokens=4)
        want = cid_ledger(tiny, parts.full, parts.empty,
                            CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=4,
                                      min_new_tokens=0), seed=4)
        assert mixed["token_ids"] == [e.token_id for e in want.entries]
        assert mixed["epsilon_ex_post"] > 0
        plain = ask(url, {"documents": DOCS, "lambda": 1.0}, seed=4, temperature=1.0,
                    max_tokens=4).model_extra["ctxleak"]
        [(ids, stopped)] = own_answers(served, [parts], [4], 1.0, 4, 0)
        assert plain["token_ids"][:len(ids)] == ids and plain["stopped_on_eos"] == stopped
        assert plain["epsilon_ex_post"] is None and plain["lambdas"] == [1.0] * plain["tokens"]
        # released before it is scored: the scoring is after (tests/proxy/test_proxy_load.py)
        assert plain["influence"] is None
        assert ledger.document("acct-7").ex_post == pytest.approx(mixed["epsilon_ex_post"])
