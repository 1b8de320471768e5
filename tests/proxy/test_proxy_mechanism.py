"""The privacy proxy deploying a defence other than CID (``ctxleak serve --mechanism``, a
request's ``ctxleak.mechanism``), with the real ``openai`` client in front of a tiny in-process
model: a DP-RAG answer equals ``DPRAG.answer`` on the same request and seed, each document is
charged the answer's claim, a budget that cannot cover it refuses the request, a stream sends
the finished answer, and bad mechanisms and too few documents are clear errors."""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import httpx
import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.proxy_server import DOCS, QUESTION, audited, chat_body, openai_client

from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.prompts import document_parts, template_prompt
from ctxleak.mitigations.scrubbing import Scrubbing
from ctxleak.proxy import Budgets, ProxyConfig

DECODING = Decoding(temperature=0.8, max_new_tokens=8, min_new_tokens=0)


def post(url: str, marked: dict[str, Any] | None = None, **body: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=120,
                      json=chat_body({"documents": DOCS, **(marked or {})}, **body))


def direct(lm, mechanism, seed: int, docs=DOCS, decoding=DECODING):
    """The mechanism asked directly, on the prompt the proxy builds."""
    request = AnswerRequest(documents=tuple(d["text"] for d in docs),
                            prompt=template_prompt(lm, QUESTION, reserve=decoding.max_new_tokens),
                            seed=seed, ids=tuple(d["id"] for d in docs), query=QUESTION)
    return mechanism.answer(lm, [request], decoding)[0]


def test_dp_rag_through_the_proxy_equals_the_mechanism_and_charges_its_claim(lm, tmp_path):
    with audited(lm, tmp_path, mechanism="dp-rag:eps=5",
                 budgets=Budgets(default=12.0)) as (url, ledger, _):
        out = openai_client(url).chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], seed=11,
            temperature=0.8, max_tokens=8, extra_body={"ctxleak": {"documents": DOCS}})
        reply = out.parse()
        info = reply.model_extra["ctxleak"]
        want = direct(lm, DPRAG(eps=5), 11)
        claim = DPRAG(eps=5).claim(DECODING)
        assert info["token_ids"] == list(want.response_ids)
        assert reply.choices[0].message.content == lm.decode(list(want.response_ids))
        assert reply.usage.completion_tokens == len(want.response_ids)
        assert reply.usage.prompt_tokens == len(document_parts(
            lm, [d["text"] for d in DOCS], QUESTION, reserve=8)[0].full)
        assert info["mode"] == "mechanism" and info["mechanism"] == DPRAG(eps=5).key()
        # an audit's answer (the client's seed) says its guarantee is void
        assert info["relation"] == "document" and info["seed"] == 11 and info["seed_known"]
        assert info["guarantee"].startswith("AUDIT: the client chose the seed")
        assert info["epsilon"] == info["epsilon_spent"] == pytest.approx(claim.eps)
        assert info["delta"] == info["delta_spent"] == claim.delta
        # the client's own documents are echoed; what the mechanism used and each one's charge
        # and budget are the operator's (issue 81)
        assert info["documents"] == ["acct-7", "acct-9"] and info["dropped"] == []
        assert not {"charged", "documents_used", "budgets"} & set(info)
        for doc in ("acct-7", "acct-9"):  # the ledger holds exactly the claim, nothing reserved
            row = ledger.document(doc)
            assert row.spent == pytest.approx(claim.eps) and row.reserved == 0
        # the reported ε is the ledger's charge, in the headers too
        assert float(out.headers["x-ctxleak-epsilon-spent"]) == ledger.document("acct-7").spent
        assert float(out.headers["x-ctxleak-delta-spent"]) == claim.delta
        assert out.headers["x-ctxleak-mechanism"] == DPRAG(eps=5).key()
        assert out.headers["x-ctxleak-mode"] == "mechanism"
        # streamed: the finished answer in chunks, the same tokens and charge
        chunks = list(openai_client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], stream=True,
            seed=11, temperature=0.8, max_tokens=8, stream_options={"include_usage": True},
            extra_body={"ctxleak": {"documents": DOCS}}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reply.choices[0].message.content
        last = chunks[-2].model_extra["ctxleak"]
        assert last == info
        assert chunks[-1].usage == reply.usage
        assert ledger.document("acct-7").spent == pytest.approx(2 * claim.eps)
        # the third answer's claim is more than the 2 left: the documents are dropped, and
        # DP-RAG has none left to answer from (429), nothing charged
        refused = post(url, seed=11, max_tokens=8, temperature=0.8)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "budget_exhausted"
        assert ledger.document("acct-7").spent == pytest.approx(2 * claim.eps)


def test_a_budget_that_cannot_cover_the_claim_refuses_the_request(lm, tmp_path):
    claim = DPRAG(eps=5).claim(DECODING).eps
    with audited(lm, tmp_path, mechanism="dp-rag:eps=5", on_exhausted="refuse",
                 budgets=Budgets(default=7.0, overrides={"acct-9": 3.0})) as (url, ledger, _):
        never = post(url, seed=1, max_tokens=8)  # acct-9's whole budget is less than the claim
        assert never.status_code == 400 and never.json()["error"]["param"] == \
            "ctxleak.mechanism"
        assert "budget of 3" in never.json()["error"]["message"]
        one = [DOCS[0]]
        assert post(url, {"documents": one}, seed=1, max_tokens=8).status_code == 200
        again = post(url, {"documents": one}, seed=2, max_tokens=8)
        assert again.status_code == 429 and again.json()["error"]["code"] == "budget_exhausted"
        assert ledger.document("acct-7").spent == pytest.approx(claim)
        assert ledger.document("acct-9").spent == 0


def test_a_request_names_its_mechanism_and_cid_specs_answer_as_cid(lm, tmp_path):
    allowed = ("dp-rag:eps=2", "dp-vote:eps=2,shards=3")  # the operator's (issue 81)
    with audited(lm, tmp_path, mechanism="cid:lam=0.5",
                 allowed_mechanisms=allowed) as (url, ledger, _):
        # no λ given: the proxy's CID spec, the same answer as ctxleak.lambda 0.5
        by_default = post(url, seed=11, max_tokens=8, temperature=0.8).json()["ctxleak"]
        by_lambda = post(url, {"lambda": 0.5}, seed=11, max_tokens=8,
                         temperature=0.8).json()["ctxleak"]
        parts = document_parts(lm, [d["text"] for d in DOCS], QUESTION, reserve=8)[0]
        want = cid_ledger(lm, parts.full, parts.empty,
                            CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=8,
                                      min_new_tokens=0), seed=11)
        assert by_default == {**by_lambda, "budgets": by_default["budgets"]}
        assert by_default["token_ids"] == [e.token_id for e in want.entries]
        assert by_default["mode"] == "lambda"
        # a request's own mechanism: DP-RAG at ε = 2, charged its claim
        out = post(url, {"mechanism": "dp-rag:eps=2"}, seed=5, max_tokens=8, temperature=0.8)
        info = out.json()["ctxleak"]
        assert info["token_ids"] == list(direct(lm, DPRAG(eps=2), 5).response_ids)
        assert ledger.document("acct-7").spent == pytest.approx(DPRAG(eps=2).claim(DECODING).eps)
        for marked, param, said in [
                ({"mechanism": "dp-nothing"}, "ctxleak.mechanism", "no mechanism named"),
                ({"mechanism": "dp-rag:eps=2", "lambda": 0.5}, "ctxleak.mechanism", "not both"),
                ({"mechanism": "dp-rag:eps=-1"}, "ctxleak.mechanism", "eps"),
                ({"mechanism": 5}, "ctxleak.mechanism", "must be a mechanism"),
                ({"mechanism": "dp-vote:eps=2,shards=3"}, "ctxleak.documents", "at least 3")]:
            bad = post(url, marked, seed=1, max_tokens=8)
            assert bad.status_code == 400, bad.text
            error = bad.json()["error"]
            assert error["param"] == param and said in error["message"], error
        # greedy decoding: DP-RAG samples by its definition
        greedy = post(url, {"mechanism": "dp-rag:eps=2"}, temperature=0, max_tokens=8)
        assert greedy.status_code == 400 and greedy.json()["error"]["param"] == "temperature"


def test_a_dp_vote_with_too_few_documents_for_its_shards_is_a_clear_400(lm, tmp_path):
    docs = [*DOCS, {"id": "acct-11", "text": "the nurse is called anna"}]
    with audited(lm, tmp_path, mechanism="dp-vote:eps=2,shards=4",
                 budgets=Budgets(default=10.0)) as (url, ledger, _):
        short = post(url, {"documents": docs}, seed=3, max_tokens=8)
        assert short.status_code == 400, short.text
        error = short.json()["error"]
        assert error["param"] == "ctxleak.documents" and "4 shards" in error["message"]
        assert ledger.document("acct-7").spent == 0  # its reservation given back
        ok = post(url, {"documents": [*docs, {"id": "acct-12", "text": "it rains"}]}, seed=3,
                  max_tokens=8)
        assert ok.status_code == 200, ok.text
        info = ok.json()["ctxleak"]
        assert info["relation"] == "shard" and info["epsilon_spent"] == pytest.approx(2.0)
        assert ledger.document("acct-12").spent == pytest.approx(2.0)


def test_scrubbing_charges_nothing_and_says_it_has_no_guarantee(lm, tmp_path):
    scrub = Scrubbing(detect=lambda text: [])  # no detector to load: the documents as they are
    with audited(lm, tmp_path, mechanism=scrub, budgets=Budgets(default=1.0),
                 unguaranteed="use") as (url, ledger, _):
        out = post(url, seed=4, max_tokens=8, temperature=0.8)
        assert out.status_code == 200, out.text
        info = out.json()["ctxleak"]
        assert info["epsilon_spent"] is None and info["charged"] == {}
        assert info["relation"] == "none" and "no differential-privacy guarantee" in \
            info["guarantee"]
        assert info["token_ids"] == list(direct(lm, scrub, 4).response_ids)
        assert out.headers["x-ctxleak-epsilon-spent"] == "none"
        assert ledger.document("acct-7").spent == 0


def test_concurrent_requests_of_one_mechanism_are_answered_in_one_call(lm, tmp_path):
    with audited(lm, tmp_path, mechanism="dp-rag:eps=5") as (url, _, app):
        batcher = app.state.proxy.batcher
        batcher.window_s = 0.5  # time for every request to arrive before the batch starts
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(lambda seed: post(url, seed=seed, max_tokens=8,
                                                   temperature=0.8), (21, 22, 23)))
        assert [o.status_code for o in outs] == [200] * 3
        assert batcher.sizes[3] == 1
        for seed, out in zip((21, 22, 23), outs):
            assert out.json()["ctxleak"]["token_ids"] == \
                list(direct(lm, DPRAG(eps=5), seed).response_ids)


def test_an_unknown_mechanism_at_startup_names_the_flag(monkeypatch, tmp_path, capsys):
    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    monkeypatch.setattr(models, "load_model", lambda name, **kw: None)
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: None)
    for spec, said in [("dp-nothing", "no mechanism named 'dp-nothing'"),
                       ("dp-rag:eps=0", "eps"), ("dp-rag:epsilon=5", "no parameter")]:
        with pytest.raises(SystemExit) as code:
            main(["serve", "--ledger", str(tmp_path / "l.db"), "--mechanism", spec])
        err = capsys.readouterr().err
        assert code.value.code == 2 and "--mechanism" in err and said in err, err
    with pytest.raises(ConfigError, match="no mechanism named"):
        ProxyConfig(mechanism="dp-nothing")
    calls: dict = {}
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    with pytest.raises(SystemExit) as ok:
        main(["serve", "--ledger", str(tmp_path / "m.db"), "--mechanism", "dp-rag:eps=5",
              "--budget", "20", "--max-tokens", "8"])
    assert ok.value.code == 0
    assert calls["run"]["config"].mechanism == DPRAG(eps=5)
    err = capsys.readouterr().err
    assert "answered by dp-rag(eps=5,delta=0.001)" in err and "allows 4 such answers" in err


def test_a_log_line_per_mechanism_answer_names_no_text(lm, tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    with audited(lm, tmp_path, mechanism="dp-rag:eps=5") as (url, _, _):
        assert post(url, seed=3, max_tokens=4).status_code == 200
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ctxleak.proxy"]
    assert [e["event"] for e in logged] == ["mechanism"]
    # the operator's log keeps what the client does not read
    assert logged[0]["documents"] == ["acct-7", "acct-9"]
    assert logged[0]["seed"] == 3 and logged[0]["seed_known"] is True
    assert not any(w in caplog.text for w in ("phone", "patient", "capital", QUESTION))


def test_dp_rag_through_a_served_model(served, tmp_path):
    """Over a served model (the fast tier's fake vLLM, every token's log-prob at each step),
    the proxy asks the mechanism alone: the tokens DP-RAG draws in-process from the same seed."""
    model, upstream = served
    decoding = Decoding(temperature=0.8, max_new_tokens=4, min_new_tokens=0)
    with audited(model, tmp_path, upstream=upstream.url,
                 mechanism="dp-rag:eps=5") as (url, ledger, app):
        assert app.state.proxy.batcher is None
        out = post(url, seed=4, temperature=0.8, max_tokens=4)
        assert out.status_code == 200, out.text
        info = out.json()["ctxleak"]
    assert info["token_ids"] == list(direct(upstream.lm, DPRAG(eps=5), 4, decoding=decoding)
                                     .response_ids)
    assert info["epsilon_spent"] == pytest.approx(DPRAG(eps=5).claim(decoding).eps)
