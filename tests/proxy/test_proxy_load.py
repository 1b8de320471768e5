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
from helpers.fake_server import fake_vllm
from helpers.proxy_server import serving as proxy_serving
from helpers.tiny_models import tiny_llama

import ctxleak.mitigations.cid as cid
from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.batching import BatchDecoder
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import Answer, Sampled, decode_answer
from ctxleak.proxy.request import CIDRequest, parse_cid_request

DOCS = [{"id": "acct-7", "text": "the phone of the patient paris is one two three"},
        {"id": "acct-9", "text": "rome is the capital of italy said the doctor"}]
QUESTION = "what is the phone of the patient ?"


@pytest.fixture
def lm(llama_lm):
    return llama_lm


def request(marked: dict[str, Any], **body: Any) -> CIDRequest:
    return parse_cid_request({"model": "tiny", "messages": [{"role": "user", "content": QUESTION}],
                              "ctxleak": marked, **body}, ProxyConfig())


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


def same_answer(got: Answer, alone: Answer) -> None:
    assert [e.token_id for e in got.ledger.entries] == \
        [e.token_id for e in alone.ledger.entries]
    assert got.text == alone.text and got.finish_reason == alone.finish_reason
    # the floats agree up to the float32 noise of a batch (a few 1e-6)
    assert got.ledger.lambdas == pytest.approx(alone.ledger.lambdas, abs=1e-4)
    assert [e.logp_context for e in got.ledger.entries] == \
        pytest.approx([e.logp_context for e in alone.ledger.entries], abs=1e-4)
    assert got.eps_spent == alone.eps_spent and got.seed == alone.seed


def test_answers_decoded_together_equal_each_decoded_alone_and_stream_apart(lm):
    requests = [request(m, **b) for m, b in REQUESTS]
    heard: list[list[LedgerEntry]] = [[] for _ in requests]
    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [
            (lambda k=k: decoder.decode(requests[k], requests[k].documents, heard[k].append))
            for k in range(len(requests))])
    finally:
        decoder.close()
    # the four sampled answers in one batch, the greedy one in its own
    assert decoder.sizes == {4: 1, 1: 1}
    for k, req in enumerate(requests):
        alone = decode_answer(lm, req, req.documents)
        same_answer(got[k], alone)
        # each answer's own entries streamed to it, in order, as its ledger has them
        assert [e.token_id for e in heard[k]] == [e.token_id for e in got[k].ledger.entries]
        assert [e.step for e in heard[k]] == list(range(len(heard[k])))
    assert got[2].eps_spent == pytest.approx(1.0 * len(got[2].ledger.entries))
    assert got[0].eps_spent is None and got[0].eps_ex_post_total > 0


def test_an_answer_is_returned_when_it_ends_not_when_its_batch_does(lm):
    """The long answer's last token is held until the short answer has come back: a short
    answer that waited for its batch would never come back (the hold times out)."""
    long = request({"documents": DOCS, "lambda": 0.5}, seed=1, max_tokens=8, min_tokens=8)
    short = request({"documents": DOCS, "epsilon": 1.0}, seed=2, max_tokens=3, min_tokens=3)
    back, waited = threading.Event(), []

    def hold(entry: LedgerEntry) -> None:
        if entry.step == 7:
            waited.append(back.wait(timeout=20))

    def ask_short() -> Answer:
        answer = decoder.decode(short, short.documents)
        back.set()
        return answer

    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [lambda: decoder.decode(long, long.documents, hold), ask_short])
    finally:
        decoder.close()
    assert decoder.sizes == {2: 1} and waited == [True]
    assert len(got[0].ledger.entries) == 8 and len(got[1].ledger.entries) == 3
    same_answer(got[1], decode_answer(lm, short, short.documents))
    same_answer(got[0], decode_answer(lm, long, long.documents))


def test_an_answer_that_fails_fails_alone(lm, monkeypatch):
    requests = [request(m, **b) for m, b in REQUESTS[:4]]

    def broken(entry: LedgerEntry) -> None:
        if entry.step == 1:
            raise ConnectionError("the client went away")

    decoder = BatchDecoder(lm, max_batch=8)
    try:
        got = together(decoder, [
            (lambda k=k: decoder.decode(requests[k], requests[k].documents,
                                        broken if k == 1 else None))
            for k in range(len(requests))])
        assert isinstance(got[1], ConnectionError)
        for k in (0, 2, 3):
            same_answer(got[k], decode_answer(lm, requests[k], requests[k].documents))
        # the batch itself fails (the model): each answer that released nothing is decoded
        # again alone; one that released tokens fails with the batch's error
        real = cid.generate_cid_many

        def fails_in_a_batch(lm_, jobs, **kw):
            if len(jobs) > 1:
                on_entry = kw["on_entry"]
                first = real(lm_, jobs[:1], sample=kw["sample"])[0].entries
                [on_entry(0, e) for e in first[:2]]  # two tokens released, not the end
                raise MemoryError("out of memory")
            return real(lm_, jobs, **kw)

        monkeypatch.setattr(cid, "generate_cid_many", fails_in_a_batch)
        got = together(decoder, [
            (lambda k=k: decoder.decode(requests[k], requests[k].documents))
            for k in range(len(requests))])
        assert isinstance(got[0], MemoryError)
        for k in (1, 2, 3):
            same_answer(got[k], decode_answer(lm, requests[k], requests[k].documents))
    finally:
        decoder.close()
    with pytest.raises(RuntimeError, match="closed"):
        decoder.decode(requests[0], requests[0].documents)


def test_concurrent_clients_of_the_proxy_are_decoded_together(lm, tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    sampled = [(m, b) for m, b in REQUESTS if b["temperature"] > 0]
    with proxy_serving(lm, ledger) as (url, app):
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
        alone = decode_answer(lm, req, req.documents)
        info = out.model_extra["ctxleak"]
        assert info["token_ids"] == [e.token_id for e in alone.ledger.entries]
        assert out.choices[0].message.content == alone.text


@pytest.fixture
def served(tmp_path):
    from ctxleak.engine.served import serve

    tiny = tiny_llama(seed=3, vocab_extra=0)  # vocabulary = tokenizer, as a served model's
    tok_dir = tmp_path / "tok"
    tiny.tokenizer.save_pretrained(tok_dir)
    with fake_vllm(tiny, never=(0, 1, 3)) as upstream:
        yield serve("tiny", upstream.url, tokenizer=str(tok_dir), check=False), upstream


def logged(caplog: Any, event: str) -> list[dict[str, Any]]:
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ctxleak.proxy"
               and r.getMessage().startswith("{")]
    return [r for r in records if r.get("event") == event]


def test_at_lambda_one_the_served_answer_is_released_before_it_is_scored(
        served, tmp_path, monkeypatch, caplog):
    """The scoring is held until the client has the answer (plain and streamed): an answer
    that waited for its scoring would never come back. Then it is scored and settled."""
    from ctxleak.methods.influence.answers import eos_masked, own_answers
    from ctxleak.proxy.decode import answer_parts

    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    lm, upstream = served
    real, go, waited = Sampled.scored, threading.Event(), []

    def held(self: Sampled) -> Answer:
        waited.append(go.wait(timeout=30))
        return real(self)

    monkeypatch.setattr(Sampled, "scored", held)
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
    scored = logged(caplog, "cid_scored")
    assert [s["influence"] for s in scored] == \
        pytest.approx([float(abs(lc - le).sum())] * 2, abs=1e-6)
    assert len(logged(caplog, "cid")) == 2
    # the library's call scores before it returns, and hands each scored entry on
    heard: list[LedgerEntry] = []
    req = request({"documents": DOCS, "lambda": 1.0}, seed=4, max_tokens=4)
    direct = decode_answer(lm, req, req.documents, heard.append)
    assert [e.token_id for e in direct.ledger.entries] == info["token_ids"]
    assert heard == list(direct.ledger.entries)
    assert sum(e.influence for e in heard) == pytest.approx(scored[0]["influence"], abs=1e-9)


def test_a_released_answer_whose_scoring_fails_closes_its_reservation(
        served, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    lm, upstream = served

    def fails(self: Sampled) -> Answer:
        raise ConnectionError("the upstream went away")

    monkeypatch.setattr(Sampled, "scored", fails)
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
