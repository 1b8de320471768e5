"""The privacy proxy under load: concurrent in-process answers decoded together in one batch
(ctxleak.proxy.batching) give each answer the tokens it gets decoded alone, stream per answer
and fail alone; at λ = 1 through a served model the answer is released before it is scored."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import openai
import pytest
from helpers.proxy_server import serving as proxy_serving

import ctxleak.mitigations.cid as cid
import ctxleak.proxy.streaming as streaming
from ctxleak.proxy.answering import Reply, answer_alone, scored
from ctxleak.proxy.batching import BatchDecoder
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.chat_request import ChatRequest
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.request import parse_request

DOCS = [{"id": "acct-7", "text": "the phone of the patient paris is one two three"},
        {"id": "acct-9", "text": "rome is the capital of italy said the doctor"}]
QUESTION = "what is the phone of the patient ?"


@pytest.fixture
def lm(llama_lm):
    return llama_lm


def request(marked: dict[str, Any], **body: Any) -> ChatRequest:
    return parse_request({"model": "tiny", "messages": [{"role": "user", "content": QUESTION}],
                              "ctxleak": marked, **body}, ProxyConfig(audit_seeds=True))


#: Answers of different settings, documents and lengths, each with its own seed.
REQUESTS = [
    ({"documents": DOCS, "lambda": 0.5}, {"seed": 1, "temperature": 0.8, "max_tokens": 8}),
    ({"documents": DOCS[:1], "lambda": 0.3}, {"seed": 2, "temperature": 1.0, "max_tokens": 5}),
    ({"documents": DOCS, "epsilon": 1.0}, {"seed": 3, "temperature": 1.0, "max_tokens": 7,
                                           "min_tokens": 3}),
    ({"documents": DOCS[1:], "epsilon": 0.5}, {"seed": 4, "temperature": 0.8, "max_tokens": 6}),
    ({"documents": DOCS, "lambda": 0.5}, {"seed": 5, "temperature": 0, "max_tokens": 6}),
]


def together(decoder: BatchDecoder, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads while the model is held, until all of them wait for it (the
    decoder takes every answer waiting once it has the model); then let the decoder have it.
    Each call's result, or the exception it raised."""
    out: list[Any] = [None] * len(calls)

    def run(k: int) -> None:
        try:
            out[k] = calls[k]()
        except Exception as exc:
            out[k] = exc

    with decoder.lock:  # the first waits for the model, the others in the queue
        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
        for t in threads:
            t.start()
        while decoder.pending() < len(calls):
            threading.Event().wait(0.005)
    for t in threads:
        t.join(60)
    return out


class Heard:
    """A listener that keeps each token (id, ε spent) and calls ``hook(count)`` after each."""

    def __init__(self, hook: Callable[[int], None] | None = None) -> None:
        self.tokens: list[tuple[int, float | None]] = []
        self.hook = hook

    def token(self, k: int, token_id: int, spent: float | None) -> None:
        self.tokens.append((token_id, spent))
        if self.hook is not None:
            self.hook(len(self.tokens))

    def done(self, k: int, answer: Any) -> None:
        pass


def entries(reply: Reply) -> Any:
    assert reply.answer.ledger is not None
    return reply.answer.ledger.entries


def same_answer(got: Reply, alone: Reply) -> None:
    assert [e.token_id for e in entries(got)] == [e.token_id for e in entries(alone)]
    assert got.text == alone.text and got.finish_reason == alone.finish_reason
    # the floats agree up to the float32 noise of a batch (a few 1e-6)
    assert got.figures["lambdas"] == pytest.approx(alone.figures["lambdas"], abs=1e-4)
    assert [e.logp_context for e in entries(got)] == \
        pytest.approx([e.logp_context for e in entries(alone)], abs=1e-4)
    assert got.figures["epsilon_spent"] == alone.figures["epsilon_spent"]
    assert got.prepared.request.seed == alone.prepared.request.seed


def test_answers_decoded_together_equal_each_decoded_alone_and_stream_apart(lm):
    requests = [request(m, **b) for m, b in REQUESTS]
    heard = [Heard() for _ in requests]
    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [
            (lambda k=k: decoder.answer(requests[k], requests[k].documents, heard[k]))
            for k in range(len(requests))])
    finally:
        decoder.close()
    # the four sampled answers in one batch, the greedy one in its own
    assert decoder.sizes == {4: 1, 1: 1}
    for k, req in enumerate(requests):
        alone = answer_alone(lm, req, req.documents)
        same_answer(got[k], alone)
        # each answer's own tokens streamed to it, in order, as its ledger has them, with what
        # each spent: ε (bounded CID) or its ex-post ε (plain CID)
        assert heard[k].tokens == [(e.token_id, e.eps if e.eps is not None else e.eps_ex_post)
                                   for e in entries(got[k])]
    assert got[2].figures["epsilon_spent"] == pytest.approx(1.0 * len(entries(got[2])))
    assert got[0].figures["epsilon_spent"] is None and got[0].figures["epsilon_ex_post"] > 0


def test_an_answer_is_returned_when_it_ends_not_when_its_batch_does(lm):
    """The long answer's last token is held until the short answer has come back: a short
    answer that waited for its batch would never come back (the hold times out)."""
    long = request({"documents": DOCS, "lambda": 0.5}, seed=1, max_tokens=8, min_tokens=8)
    short = request({"documents": DOCS, "epsilon": 1.0}, seed=2, max_tokens=3, min_tokens=3)
    back, waited = threading.Event(), []

    def hold(count: int) -> None:
        if count == 8:
            waited.append(back.wait(timeout=20))

    def ask_short() -> Reply:
        reply = decoder.answer(short, short.documents)
        back.set()
        return reply

    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [lambda: decoder.answer(long, long.documents, Heard(hold)),
                                 ask_short])
    finally:
        decoder.close()
    assert decoder.sizes == {2: 1} and waited == [True]
    assert len(entries(got[0])) == 8 and len(entries(got[1])) == 3
    same_answer(got[1], answer_alone(lm, short, short.documents))
    same_answer(got[0], answer_alone(lm, long, long.documents))


def test_an_answer_that_fails_fails_alone(lm, monkeypatch):
    requests = [request(m, **b) for m, b in REQUESTS[:4]]

    def broken(count: int) -> None:
        if count == 2:
            raise ConnectionError("the client went away")

    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [
            (lambda k=k: decoder.answer(requests[k], requests[k].documents,
                                        Heard(broken) if k == 1 else None))
            for k in range(len(requests))])
        assert isinstance(got[1], ConnectionError)
        for k in (0, 2, 3):
            same_answer(got[k], answer_alone(lm, requests[k], requests[k].documents))
        # the batch itself fails (the model): each answer that released nothing is decoded
        # again alone; one that released tokens fails with the batch's error
        real = cid._generate_many

        def fails_in_a_batch(lm_, jobs, **kw):
            if len(jobs) > 1:
                on_entry = kw["on_entry"]
                first = real(lm_, jobs[:1], sample=kw["sample"])[0].entries
                [on_entry(0, e) for e in first[:2]]  # two tokens released, not the end
                raise MemoryError("out of memory")
            return real(lm_, jobs, **kw)

        monkeypatch.setattr(cid, "_generate_many", fails_in_a_batch)
        got = together(decoder, [
            (lambda k=k: decoder.answer(requests[k], requests[k].documents))
            for k in range(len(requests))])
        assert isinstance(got[0], MemoryError)
        for k in (1, 2, 3):
            same_answer(got[k], answer_alone(lm, requests[k], requests[k].documents))
    finally:
        decoder.close()
    with pytest.raises(RuntimeError, match="closed"):
        decoder.answer(requests[0], requests[0].documents)


def test_concurrent_clients_of_the_proxy_are_decoded_together(lm, tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    sampled = [(m, b) for m, b in REQUESTS if b["temperature"] > 0]
    with proxy_serving(lm, ledger, audit_seeds=True) as (url, app):  # the answers' own seeds
        proxy = app.state.proxy

        def ask(marked: dict[str, Any], body: dict[str, Any]) -> Callable[[], Any]:
            extra = {k: body[k] for k in ("min_tokens",) if k in body}
            return lambda: openai.OpenAI(base_url=url + "/v1", api_key="none").chat \
                .completions.create(model="tiny", messages=[{"role": "user",
                                                             "content": QUESTION}],
                                    seed=body["seed"], temperature=body["temperature"],
                                    max_tokens=body["max_tokens"],
                                    extra_body={"ctxleak": marked, **extra})

        got = together(proxy.batcher, [ask(m, b) for m, b in sampled])
    ledger.close()
    assert proxy.batcher.sizes[len(sampled)] == 1
    for out, (m, b) in zip(got, sampled):
        req = request(m, **b)
        alone = answer_alone(lm, req, req.documents)
        info = out.model_extra["ctxleak"]
        assert info["token_ids"] == [e.token_id for e in entries(alone)]
        assert out.choices[0].message.content == alone.text


def logged(caplog: Any, event: str) -> list[dict[str, Any]]:
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ctxleak.proxy"
               and r.getMessage().startswith("{")]
    return [r for r in records if r.get("event") == event]


def test_at_lambda_one_the_served_answer_is_released_before_it_is_scored(
        served, tmp_path, monkeypatch, caplog):
    """The scoring is held until the client has the answer (plain and streamed): an answer
    that waited for its scoring would never come back. Then it is scored and settled."""
    from ctxleak.methods.influence.answers import eos_masked, own_answers
    from ctxleak.proxy.answering import answer_parts

    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    lm, upstream = served
    go, waited = threading.Event(), []

    def held(reply: Reply) -> Reply:
        waited.append(go.wait(timeout=30))
        return scored(reply)

    monkeypatch.setattr(streaming, "scored", held)
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    with proxy_serving(lm, ledger, upstream=upstream.url, charge_ex_post=True) as (url, app):
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        kwargs: dict[str, Any] = {
            "model": "tiny", "messages": [{"role": "user", "content": QUESTION}], "seed": 4,
            "temperature": 1.0, "max_tokens": 4,
            "extra_body": {"ctxleak": {"documents": DOCS, "lambda": 1.0}}}
        out = client.chat.completions.create(**kwargs)
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        assert not go.is_set() and waited == []  # both answered, neither scored yet
        info = out.model_extra["ctxleak"]
        assert chunks[-1].model_extra["ctxleak"] == info
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
            out.choices[0].message.content
        parts = answer_parts(lm, request({"documents": DOCS, "lambda": 1.0}).documents,
                             QUESTION, 4)[0]
        [(ids, stopped)] = own_answers(lm, [parts], [4], 1.0, 4, 0)
        assert info["token_ids"][:len(ids)] == ids and info["stopped_on_eos"] == stopped
        assert info["influence"] is None and info["epsilon_ex_post"] is None
        assert len(ledger.open_reservations()) == 4  # two answers × two documents, still open
        go.set()
    ledger_open = ledger.open_reservations()  # the proxy stopped after both were settled
    ledger.close()
    assert waited == [True, True] and ledger_open == []
    lc, le = eos_masked(lm, [parts.full, parts.empty], [info["token_ids"]] * 2, 0)
    scores = logged(caplog, "cid_scored")
    assert [s["influence"] for s in scores] == \
        pytest.approx([float(abs(lc - le).sum())] * 2, abs=1e-6)
    assert len(logged(caplog, "cid")) == 2
    # the library's call releases the answer unscored, each token heard; its later scoring
    # gives the influence the proxy logged
    heard = Heard()
    req = request({"documents": DOCS, "lambda": 1.0}, seed=4, max_tokens=4)
    released = answer_alone(lm, req, req.documents, heard)
    assert released.figures["influence"] is None and released.answer.later is not None
    direct = scored(released)
    assert [e.token_id for e in entries(direct)] == info["token_ids"]
    assert [t for t, _ in heard.tokens] == info["token_ids"]
    assert direct.figures["influence"] == pytest.approx(scores[0]["influence"], abs=1e-9)


def test_a_released_answer_whose_scoring_fails_closes_its_reservation(
        served, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    lm, upstream = served

    def fails(reply: Reply) -> Reply:
        raise ConnectionError("the upstream went away")

    monkeypatch.setattr(streaming, "scored", fails)
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    with proxy_serving(lm, ledger, upstream=upstream.url, charge_ex_post=True) as (url, _):
        out = openai.OpenAI(base_url=url + "/v1", api_key="none").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], seed=4,
            temperature=1.0, max_tokens=4,
            extra_body={"ctxleak": {"documents": DOCS, "lambda": 1.0}})
        assert out.model_extra["ctxleak"]["tokens"] >= 1
    ledger_open, spent = ledger.open_reservations(), ledger.document("acct-7").spent
    ledger.close()
    assert ledger_open == [] and spent == 0  # λ = 1 without ε spends no guaranteed ε
    assert [e["error"] for e in logged(caplog, "cid_scoring_failed")] == ["ConnectionError"]
