"""The privacy proxy answering over its datastore (``ctxleak serve --datastore FILE
--mechanism ...``), as the DP-RAG and DP-vote papers define their input: the mechanism
retrieves for itself, a plain chat request (no ``ctxleak`` field) is answered rather than passed
through, each private document of the datastore is charged its own loss in the answer (the
claim where a voter reads it, nothing otherwise), a document whose budget that would pass is not
retrieved, and the answer equals the mechanism asked directly."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from helpers.proxy_server import chat_body, openai_client, serving_sqlite

from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.dp_vote import DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.prompts import template_prompt
from ctxleak.proxy import Budgets, ProxyConfig

STORE = Datastore.of([(f"doc-{k}", text) for k, text in enumerate([
    "the patient name is paris and the phone is one two three",
    "the doctor said the capital of italy is rome",
    "the capital of france is paris",
    "the capital of italy is rome and the river is the tiber",
    "the patient was seen on monday by the doctor",
    "the phone of the clinic is four five six",
    "rome is the capital of italy",
    "paris is the capital of france"])])
QUESTION = "what is the capital of italy ?"
SPEC = "dp-vote:eps=2,shards=4"
DECODING = Decoding(temperature=0.8, max_new_tokens=6, min_new_tokens=0)


def ask(url: str, **body: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=120, json=chat_body(
        None, QUESTION, **{"seed": 5, "temperature": 0.8, "max_tokens": 6, **body}))


def direct(lm: Any, store: Datastore) -> Any:
    """DPVote asked directly over ``store``, on the prompt the proxy builds."""
    request = AnswerRequest(documents=(), prompt=template_prompt(lm, QUESTION, reserve=6),
                            seed=5, query=QUESTION, datastore=store)
    return DPVote(eps=2, shards=4).answer(lm, [request], DECODING)[0]


def test_a_plain_request_is_answered_over_the_datastore_each_document_charged_its_own_loss(
        lm, tmp_path):
    """Each document a voter reads is charged the claim, every other nothing (its removal
    could not change the answer): none of them is written to the ledger."""
    claim = DPVote(eps=2, shards=4).claim(DECODING)
    # the answer is compared with the mechanism's under the client's seed: an audit
    with serving_sqlite(lm, tmp_path / "l.db", mechanism=SPEC, datastore=STORE,
                        budgets=Budgets(default=10.0), audit_seeds=True) as (url, ledger, _):
        # the real openai client, no ctxleak field at all: the app as it is
        raw = openai_client(url).chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], seed=5,
            temperature=0.8, max_tokens=6)
        info = raw.parse().model_extra["ctxleak"]
        want = direct(lm, STORE)
        assert info["mode"] == "mechanism" and info["relation"] == "document"
        assert info["token_ids"] == list(want.response_ids)
        read = set(want.datastore_used)
        # at most one per voter's shard (per_voter = 1), and only documents sharing a content
        # word with "capital of italy": doc-1, 2, 3, 6, 7 (a shard with none gives its voter none)
        assert 0 < len(read) <= 4 and read <= {"doc-1", "doc-2", "doc-3", "doc-6", "doc-7"}
        for doc_id, _ in STORE.documents:
            row = ledger.find(doc_id)
            if doc_id in read:
                assert row is not None and row.spent == pytest.approx(claim.eps)
            else:
                assert row is None
        # no datastore id leaves the proxy: the ledger has the charges
        assert not {"documents_used", "documents", "dropped", "charged", "budgets"} & set(info)
        assert "x-ctxleak-charged" not in raw.headers


def test_a_spent_document_a_voter_would_read_is_left_out_and_the_next_best_charged(
        lm, tmp_path):
    claim = DPVote(eps=2, shards=4).claim(DECODING)
    budgets = Budgets(default=10.0)
    read = direct(lm, STORE).datastore_used
    spent, idle = read[0], next(i for i, _ in STORE.documents if i not in read)
    with serving_sqlite(lm, tmp_path / "l.db", mechanism=SPEC, datastore=STORE,
                        budgets=budgets, audit_seeds=True) as (url, ledger, _):
        for doc in (spent, idle):  # both budgets spent before the question
            ledger.reserve("spend-" + doc, [doc], 10.0, budgets)
            ledger.settle("spend-" + doc, 10.0)
        resp = ask(url, ctxleak={})
        assert resp.status_code == 200, resp.text
        info = resp.json()["ctxleak"]
        # the filter leaves out the spent document a voter would read; the spent one no voter
        # reads stays (its presence cannot change the answer) and is charged nothing
        rest = Datastore(tuple(d for d in STORE.documents if d[0] != spent))
        want = direct(lm, rest)
        assert info["token_ids"] == list(want.response_ids)
        assert ledger.document(spent).spent == ledger.document(idle).spent == 10.0
        for doc in want.datastore_used:
            assert ledger.document(doc).spent == pytest.approx(claim.eps)
        assert "dropped" not in info  # which document is spent is the operator's
        bad = ask(url, ctxleak={"documents": [{"id": "x", "text": "a note"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "ctxleak.documents"
        assert "own datastore" in bad.json()["error"]["message"]
        assert "8" not in bad.json()["error"]["message"]  # nor its size


def test_a_datastore_needs_a_mechanism_and_a_readable_file(tmp_path):
    with pytest.raises(ConfigError, match="mechanism"):
        ProxyConfig(datastore=STORE)
    bad = tmp_path / "store.jsonl"
    bad.write_text('{"id": "a", "text": "t"}\n{"id": "b"}\n')
    with pytest.raises(Exception, match=r"store.jsonl:2, field 'text': missing field"):
        ProxyConfig(datastore=str(bad), mechanism=SPEC)
    config = ProxyConfig(datastore="demo-datastore", mechanism="dp-rag:eps=5",
                         prompt_messages="short-answer")
    assert len(config.datastore) == 288 and config.prompt_messages[0][0] == "system"


def test_serve_takes_the_datastore_and_the_apps_prompt_and_says_so(monkeypatch, tmp_path,
                                                                     capsys):
    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: None)
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    store = tmp_path / "store.jsonl"
    store.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                             for i, t in STORE.documents))
    with pytest.raises(SystemExit) as ok:
        main(["serve", "--ledger", str(tmp_path / "l.db"), "--mechanism", SPEC,
              "--datastore", str(store), "--prompt-messages", "short-answer",
              "--budget", "20", "--max-tokens", "8"])
    assert ok.value.code == 0
    config = calls["run"]["config"]
    assert config.datastore == STORE and config.prompt_messages[0][0] == "system"
    err = capsys.readouterr().err
    assert "of every private document of the datastore (8 documents" in err
    with pytest.raises(SystemExit) as bad:
        main(["serve", "--ledger", str(tmp_path / "m.db"), "--datastore", str(store)])
    assert bad.value.code == 2 and "--mechanism" in capsys.readouterr().err


def test_the_apps_messages_are_the_prompt_the_mechanism_answers_under(lm, tmp_path):
    """Through a chat model (a tiny one with a chat template), the answer is the mechanism's on
    the app's messages rendered by it; a model without a template is refused at startup."""
    from helpers.tiny_bpe import tiny_bpe_llama

    from ctxleak.methods.rag.app_prompt import load_prompt_messages
    from ctxleak.mitigations.prompts import app_chat_prompt
    from ctxleak.proxy import create_app

    chat = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
    model = tiny_bpe_llama(["<system>answer in a few words.</s><user>document: "
                            + " ".join(t for _, t in STORE.documents)
                            + " question: " + QUESTION + "</s><assistant>"], chat)
    model.use_chat_template = True
    messages = [{"role": "system", "content": "answer in a few words."},
                {"role": "user", "content": "document: {context} question: {query}"}]
    with serving_sqlite(model, tmp_path / "l.db", mechanism=SPEC, datastore=STORE,
                        prompt_messages=messages, audit_seeds=True) as (url, _, _):
        resp = ask(url)
        assert resp.status_code == 200, resp.text
        info = resp.json()["ctxleak"]
    prompt = app_chat_prompt(model, load_prompt_messages(messages), QUESTION)
    request = AnswerRequest(documents=(), prompt=prompt, seed=5, query=QUESTION,
                            datastore=STORE)
    want = DPVote(eps=2, shards=4).answer(model, [request], DECODING)[0]
    assert info["token_ids"] == list(want.response_ids)
    assert resp.json()["usage"]["prompt_tokens"] == len(prompt([]))
    assert prompt([]) != template_prompt(model, QUESTION, reserve=6)([])
    with pytest.raises(ConfigError, match="chat template"):
        create_app(lm, ledger=str(tmp_path / "m.db"),
                   config=ProxyConfig(mechanism=SPEC, datastore=STORE,
                                      prompt_messages=messages))
