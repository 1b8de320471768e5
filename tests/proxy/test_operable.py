"""The privacy proxy as an operator meets it: the documented budget example, reservations that
can never fit (refused with their arithmetic, or dropped loudly), the response's figures equal to
the ledger's charges, budgets by document class, the ledger API, ``/v1/models``, the ledger in
response headers, the budget gauges and latency histograms of ``/metrics``, ``--threads``, and
no deprecation warnings from transformers."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import httpx
import openai
import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.fake_server import fake_vllm
from helpers.proxy_server import QUESTION, openai_client
from helpers.proxy_server import serving as proxy_serving

from ctxleak.errors import ConfigError
from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.budget import SQLiteLedger, answers_allowed
from ctxleak.proxy.held import sizing_text

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "faq-2", "text": "the doctor said the capital of italy is rome"}]


@pytest.fixture
def proxy(lm, tmp_path):
    """``proxy(**config)``: the proxy served in a thread; yields (url, ledger)."""
    opened = []

    def start(**config: Any):
        # these tests repeat an answer by its seed: a client's seed is refused for a DP answer
        # unless the operator audits (issue 81), so they serve as an audit
        config.setdefault("audit_seeds", True)
        ledger = SQLiteLedger(tmp_path / f"ledger{len(opened)}.db")
        cm = proxy_serving(lm, ledger, **config)
        url, _ = cm.__enter__()
        opened.append((cm, ledger))
        return url, ledger

    yield start
    for cm, ledger in reversed(opened):
        cm.__exit__(None, None, None)
        ledger.close()


def ask(url: str, marked: dict[str, Any], **kwargs: Any) -> Any:
    return openai_client(url).chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": QUESTION}],
        extra_body={"ctxleak": marked}, **kwargs)


def test_answers_allowed_is_the_floor_of_budget_over_reservation():
    assert answers_allowed(8, 0.5, 32) == 0  # 0.5 × 33 = 16.5 > 8
    assert answers_allowed(16, 0.1, 32) == 4  # 16 / 3.3 = 4.85
    assert answers_allowed(3.3, 0.1, 32) == 1  # exactly one, whatever 0.1 × 33 rounds to
    assert answers_allowed(6.6, 0.1, 32) == 2
    assert answers_allowed(0, 0.1, 32) == 0
    with pytest.raises(ConfigError):
        answers_allowed(8, 0, 32)
    line = sizing_text(Budgets(default=16, classes={"restricted": 4}), 32)
    assert "every document: 16 → answers of 32 tokens: 9 at ε 0.05, 4 at ε 0.1" in line
    assert "class restricted: 4 → answers of 32 tokens: 2 at ε 0.05, 1 at ε 0.1" in line
    assert "⌊B / (ε·(L+1))⌋" in line


def test_the_old_docs_example_is_refused_with_its_arithmetic_the_new_one_answers(proxy):
    """--budget 8 with ε 0.5 and max_tokens 32 can never fit (0.5 × 33 = 16.5 > 8): HTTP 400
    naming the arithmetic, nothing reserved; dropped loudly when so configured (context-free
    answer, 0 ε spent as charged, warnings said). The documented numbers (budget 16, ε 0.1,
    max_tokens 32) answer with the documents, each charged what the response says."""
    url, ledger = proxy(budgets=Budgets(default=8.0))
    with pytest.raises(openai.BadRequestError) as caught:
        ask(url, {"documents": DOCS, "epsilon": 0.5}, max_tokens=32, seed=7)
    body = caught.value.body
    assert body["code"] == "reservation_exceeds_budget" and body["param"] == "max_tokens"
    assert "0.5 × 33 = 16.5" in body["message"] and "budget of 8" in body["message"]
    assert "max_tokens ≤ 15 (0.5 × 16 = 8)" in body["message"]
    assert ledger.open_reservations() == [] and ledger.find("acct-7") is None

    url, ledger = proxy(budgets=Budgets(default=8.0), on_unfittable="drop")
    raw = ask(url, {"documents": DOCS, "epsilon": 0.5}, max_tokens=32, seed=7)
    info = raw.parse().model_extra["ctxleak"]
    assert raw.http_response.status_code == 200
    assert info["documents"] == [] and info["dropped"] == ["acct-7", "faq-2"]
    # a DP answer names no per-document charge (issue 81); its own documents are echoed
    assert info["epsilon_spent"] == 0.0 and "charged" not in info
    assert len(info["warnings"]) == 2 and "16.5" in info["warnings"][0]
    assert raw.headers["x-ctxleak-warnings"] == "2"
    assert raw.headers["x-ctxleak-dropped"] == json.dumps(["acct-7", "faq-2"])
    assert ledger.document("acct-7").spent == 0 and ledger.document("faq-2").spent == 0

    url, ledger = proxy(budgets=Budgets(default=16.0))
    spent = 0.0
    for seed in range(2):
        raw = ask(url, {"documents": DOCS, "epsilon": 0.1}, max_tokens=32, seed=seed)
        info = raw.parse().model_extra["ctxleak"]
        assert info["documents"] == ["acct-7", "faq-2"] and info["dropped"] == []
        assert info["epsilon_spent"] == pytest.approx(0.1 * info["tokens"])
        assert "charged" not in info and "budgets" not in info  # the operator's (issue 81)
        spent += info["epsilon_spent"]
        for doc in ("acct-7", "faq-2"):
            row = ledger.document(doc)
            assert row.spent == pytest.approx(spent) and row.budget == 16.0
            assert answers_allowed(row.remaining, 0.1, 32) == \
                math.floor((16.0 - spent) / 3.3 + 1e-9)
        assert float(raw.headers["x-ctxleak-epsilon-spent"]) == info["epsilon_spent"]
        assert "x-ctxleak-charged" not in raw.headers
    assert ledger.open_reservations() == []


def test_budgets_by_class_public_never_charged_and_classes_are_the_operators(proxy):
    eps, max_tokens = 0.25, 3
    need = eps * (max_tokens + 1)
    budgets = Budgets(default=10.0, classes={"restricted": need}, overrides={"pinned": 5.0})
    url, ledger = proxy(budgets=budgets, classes={"acct-7": "restricted", "faq-2": "public",
                                                  "pinned": "public"})
    # a client may repeat the operator's class, or give none
    docs = [{**DOCS[0], "class": "restricted"}, DOCS[1],
            {"id": "pinned", "text": "a pinned note"}]
    info = ask(url, {"documents": docs, "epsilon": eps}, max_tokens=max_tokens,
               seed=1).parse().model_extra["ctxleak"]
    assert info["documents"] == ["acct-7", "faq-2", "pinned"]
    # public faq-2 is used and never charged; pinned has its own budget, so it is private
    assert ledger.find("pinned").spent == ledger.find("acct-7").spent > 0
    assert ledger.find("faq-2") is None
    assert ledger.find("acct-7").doc_class == "restricted"
    assert ledger.find("acct-7").budget == need
    # the restricted budget is used up by one answer: dropped from the next
    again = ask(url, {"documents": DOCS[:1], "epsilon": eps}, max_tokens=max_tokens,
                seed=2).parse().model_extra["ctxleak"]
    assert again["dropped"] == ["acct-7"] and again["epsilon_spent"] == 0
    # a client cannot call a restricted document public, nor class a document the operator
    # did not: first-come classes would let any client lift a budget
    with pytest.raises(openai.BadRequestError) as caught:
        ask(url, {"documents": [{**DOCS[0], "class": "public"}], "epsilon": eps})
    assert caught.value.body["code"] == "class_conflict"
    assert "'restricted'" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        ask(url, {"documents": [{"id": "new-1", "text": "a note", "class": "public"}],
                  "epsilon": eps})
    assert caught.value.body["code"] == "class_not_set"
    assert ledger.find("new-1") is None
    with pytest.raises(ConfigError, match="never charged"):
        Budgets(classes={"public": 1.0})
    with pytest.raises(openai.BadRequestError) as caught:
        ask(url, {"documents": [{**DOCS[0], "class": 3}], "epsilon": eps})
    assert caught.value.body["param"] == "ctxleak.documents[0].class"


def test_ledger_api_pages_and_unknown_ids(proxy):
    url, ledger = proxy(budgets=Budgets(default=10.0), api_key="k", operator_api_key="op")
    for doc in ("c", "a", "b"):
        ledger.reserve(f"r-{doc}", [doc], 1.5, Budgets(default=10.0))
    ledger.settle("r-a", 0.5)
    key = {"authorization": "Bearer op"}  # the operator's key (issue 81)
    assert httpx.get(url + "/v1/ctxleak/documents").status_code == 401
    client_key = httpx.get(url + "/v1/ctxleak/documents", headers={"authorization": "Bearer k"})
    assert client_key.status_code == 403
    assert client_key.json()["error"]["code"] == "operator_key_required"
    first = httpx.get(url + "/v1/ctxleak/documents", params={"limit": 2}, headers=key).json()
    assert [d["id"] for d in first["data"]] == ["a", "b"]
    assert first["total"] == 3 and first["next_offset"] == 2
    rest = httpx.get(url + "/v1/ctxleak/documents", params={"offset": 2, "limit": 2},
                     headers=key).json()
    assert [d["id"] for d in rest["data"]] == ["c"] and rest["next_offset"] is None
    a = httpx.get(url + "/v1/ctxleak/documents/a", headers=key).json()
    assert a["epsilon_spent"] == 0.5 and a["epsilon_reserved"] == 0
    assert a["budget"] == 10.0 and a["remaining"] == 9.5
    assert rest["data"][0]["epsilon_reserved"] == 1.5  # c's answer is still open
    missing = httpx.get(url + "/v1/ctxleak/documents/nope", headers=key)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "document_not_found"
    bad = httpx.get(url + "/v1/ctxleak/documents", params={"limit": "-1"}, headers=key)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_models_lists_the_upstreams(lm, proxy):
    url, _ = proxy()
    assert [m.id for m in openai_client(url).models.list().data] == ["ctxleak-cid"]
    with fake_vllm(lm, served_name="smollm2-135m") as upstream:
        url, _ = proxy(upstream=upstream.url + "/v1")
        assert [m.id for m in openai_client(url).models.list().data] == ["smollm2-135m"]
    url, _ = proxy(upstream=upstream.url)  # the upstream has stopped
    gone = httpx.get(url + "/v1/models")
    assert gone.status_code == 502 and gone.json()["error"]["type"] == "upstream_error"


def test_metrics_budget_gauges_exhaustion_and_latency_by_route(proxy):
    url, ledger = proxy(budgets=Budgets(default=4.0, overrides={"small": 1.0}),
                        metrics_documents=2)
    for doc, amount in [("a", 1.0), ("b", 3.0), ("c", 0.5), ("small", 1.0)]:
        ledger.reserve(f"r-{doc}", [doc], amount, Budgets(default=4.0,
                                                          overrides={"small": 1.0}))
    info = ask(url, {"documents": [{"id": "small", "text": "x y"}], "epsilon": 0.25},
               max_tokens=2).parse().model_extra["ctxleak"]
    assert info["dropped"] == ["small"]
    httpx.get(url + "/v1/models")
    text = httpx.get(url + "/metrics").text
    # the 2 documents with the least left: small (0) and b (1); a count of all 4
    assert 'ctxleak_proxy_budget_remaining{document="small"} 0.0' in text
    assert 'ctxleak_proxy_budget_remaining{document="b"} 1.0' in text
    assert 'document="a"' not in text and 'document="c"' not in text
    assert "ctxleak_proxy_ledger_documents 4.0" in text
    assert 'ctxleak_proxy_budget_exhausted_total{action="drop"} 1.0' in text
    for route in ("chat", "models"):
        assert f'ctxleak_proxy_request_seconds_count{{route="{route}"}} 1.0' in text


def test_streamed_answers_carry_the_reservation_in_headers(proxy):
    url, ledger = proxy(budgets=Budgets(default=10.0))
    body = {"model": "tiny", "messages": [{"role": "user", "content": QUESTION}],
            "stream": True, "max_tokens": 3, "seed": 2,
            "ctxleak": {"documents": DOCS, "epsilon": 0.5}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        headers = resp.headers
        lines = [line for line in resp.iter_lines() if line.startswith("data: {")]
    # a DP answer's reservation per document is the operator's (issue 81); its client's own
    # documents are echoed
    assert "x-ctxleak-epsilon-reserved" not in headers
    assert json.loads(headers["x-ctxleak-documents"]) == ["acct-7", "faq-2"]
    assert headers["x-ctxleak-request-id"].startswith("chatcmpl-")
    info = json.loads(lines[-1][6:])["ctxleak"]
    assert ledger.document("acct-7").spent == pytest.approx(info["epsilon_spent"])
    assert 0 < info["epsilon_spent"] <= 2.0 and "charged" not in info


def test_threads_set_the_worker_pool_and_are_validated(proxy, monkeypatch):
    import anyio.from_thread
    import anyio.to_thread

    seen: list[int] = []
    url, ledger = proxy(budgets=Budgets(default=10.0), worker_threads=3)
    real = ledger.classes_of

    def spy(ids):  # runs in a worker thread: ask the server's loop for its pool's size
        seen.append(anyio.from_thread.run_sync(
            lambda: anyio.to_thread.current_default_thread_limiter().total_tokens))
        return real(ids)

    monkeypatch.setattr(ledger, "classes_of", spy)
    ask(url, {"documents": DOCS, "epsilon": 0.5}, max_tokens=2)
    assert seen == [3]
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ConfigError, match="threads"):
            ProxyConfig(worker_threads=bad)
    for name, bad in [("on_unfittable", "ignore"), ("ex_post_reserve", 0.0),
                      ("ex_post_reserve", float("inf")), ("metrics_documents", -1)]:
        with pytest.raises(ConfigError) as caught:
            ProxyConfig(**{name: bad})
        assert caught.value.param == name


def test_cli_serve_budget_flags_and_its_start_line(monkeypatch, tmp_path, capsys):
    from typer.testing import CliRunner

    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import app, main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: None)
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    classes = tmp_path / "classes.csv"
    classes.write_text("id,class\nacct-7,restricted\nfaq-2,public\n")
    args = ["serve", "--ledger", str(tmp_path / "l.db"), "--budget", "16", "--class-budget",
            "restricted=4,internal=8", "--worker-threads", "3", "--on-unfittable", "drop",
            "--charge-ex-post", "--ex-post-reserve", "0.5", "--metrics-documents", "5",
            "--max-tokens", "32", "--classes", str(classes), "--unguaranteed", "drop",
            "--max-concurrent", "2", "--max-queued", "5", "--threads", "1"]
    torch_threads: list[int] = []
    monkeypatch.setattr("torch.set_num_threads", torch_threads.append)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    config = calls["run"]["config"]
    assert torch_threads == [1]  # --threads means torch's threads, as in every command
    assert config.classes == {"acct-7": "restricted", "faq-2": "public"}
    assert config.unguaranteed == "drop" and config.max_queued == 5
    assert "2 requests answered at once, 5 more wait in arrival order, past that HTTP 429" in \
        result.output
    assert "2 document class(es) set by the operator" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "class": "public"}\n{"id": "a", "class": "restricted"}\n')
    with pytest.raises(SystemExit) as code:
        main(["serve", "--ledger", str(tmp_path / "c.db"), "--classes", str(bad)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and f"{bad}:2, field 'class'" in err
    assert config.budgets.of("x", "restricted") == 4 and config.budgets.of("x", "other") == 16
    assert config.worker_threads == 3 and config.on_unfittable == "drop"
    assert config.ex_post_reserve == 0.5 and config.metrics_documents == 5
    assert "every document: 16 → answers of 32 tokens: 9 at ε 0.05, 4 at ε 0.1" in \
        result.output
    with pytest.raises(SystemExit) as code:
        main(["serve", "--ledger", str(tmp_path / "m.db"), "--worker-threads", "0"])
    assert code.value.code == 2 and "--worker-threads must be an integer >= 1" in \
        capsys.readouterr().err


def test_decoding_raises_no_deprecation_warning(lm):
    """The KV cache goes to the model under the name its transformers release takes (no
    FutureWarning on every forward pass of every model command)."""
    from ctxleak.mitigations.cid import CIDConfig

    ids = lm.tokenizer("the patient name is paris", add_special_tokens=False)["input_ids"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cid_ledger(lm, ids, ids[:2], CIDConfig(lam=0.5, max_new_tokens=4, min_new_tokens=0), seed=1)
    assert [str(w.message) for w in caught
            if issubclass(w.category, (FutureWarning, DeprecationWarning))] == []


def test_run_proxy_keeps_the_logging_a_process_configured(lm, tmp_path, monkeypatch):
    """uvicorn's own logging configuration replaces every handler of the process: run_proxy
    asks for it only where the process has configured none (the command line)."""
    import logging

    import uvicorn

    from ctxleak.proxy.app import run_proxy

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])  # the service's own
    run_proxy(lm, ledger=SQLiteLedger(tmp_path / "a.db"))
    monkeypatch.setattr(root, "handlers", [])  # nothing configured
    run_proxy(lm, ledger=SQLiteLedger(tmp_path / "b.db"))
    from uvicorn.config import LOGGING_CONFIG

    assert calls[0]["log_config"] is None and calls[1]["log_config"] is LOGGING_CONFIG
    assert calls[0]["log_level"] == calls[1]["log_level"] == "info"
