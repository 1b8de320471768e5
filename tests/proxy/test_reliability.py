"""The privacy proxy under hostile input and failing neighbours: an upstream that echoes the
Authorization header (masked in everything relayed), credentials in URLs (refused, or masked on
the start line), a spent document kept out of plain-CID answers, input that once gave HTTP 500
(deep nesting, lone surrogates, NUL ids, an ε whose reservation overflows, a vanishing
temperature), a ledger that stops answering (``/health`` says so), a client that never sends its
body (holds no slot), and ``serve``'s port and upstream checked before the model loads."""

from __future__ import annotations

import json
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from helpers.proxy_server import DOCS, audited, chat_body, served_tiny

from ctxleak.engine.served_client import ClientOptions, ServedClient
from ctxleak.errors import ConfigError
from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.budget import SQLiteLedger, answers_allowed, public_ledger_url
from ctxleak.proxy.errors import decoding_failed

KEY = "sk-upstream-s3cr3t/key"


@contextmanager
def echoing_upstream() -> Iterator[str]:
    """An upstream that echoes the Authorization header it got, as the request's ``model``
    asks: ``401`` (JSON), ``500`` (JSON, so the proxy's 502 quotes it), ``200`` (JSON),
    ``stream`` (a 200 event stream) or ``text`` (a 502 page that is not JSON)."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            echo = f"bad header Authorization: {self.headers.get('authorization')} " \
                   f"(key {self.headers.get('authorization', '')[7:]})"
            mode = body["model"]
            kind, status = "application/json", 200
            raw = json.dumps({"error": {"message": echo}}).encode()
            if mode in ("401", "500"):
                status = int(mode)
            elif mode == "stream":
                kind = "text/event-stream"
                raw = f"data: {json.dumps({'echo': echo})}\n\ndata: [DONE]\n\n".encode()
            elif mode == "text":
                kind, status, raw = "text/html", 502, echo.encode()
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def post(url: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + "/v1/chat/completions", content=content,
                      headers={"content-type": "application/json"}, timeout=60, **kw)


def test_an_upstream_echoing_the_key_never_hands_it_to_a_client(lm, tmp_path):
    """Whatever the upstream echoes of the proxy's key (plain, JSON-escaped, after
    ``Bearer``), in an error relayed as it came, a 502 quoting it, a 200 or a stream, the
    client reads ``***``."""
    with echoing_upstream() as upstream, \
            audited(lm, tmp_path, upstream=upstream, upstream_api_key=KEY) as (url, _, _):
        for mode, status in [("401", 401), ("500", 502), ("200", 200), ("stream", 200),
                             ("text", 502)]:
            resp = post(url, {"model": mode, "messages": [{"role": "user", "content": "hi"}],
                              "stream": mode == "stream"})
            assert resp.status_code == status, (mode, resp.text)
            assert "s3cr3t" not in resp.text, mode
            assert "***" in resp.text, mode
            if mode in ("401", "200"):  # relayed as JSON, still JSON
                assert "Bearer ***" in resp.json()["error"]["message"]


def test_the_mask_takes_tokens_not_prose():
    from ctxleak.proxy.errors import secret_mask

    mask = secret_mask(KEY)
    assert mask("Authorization: Bearer abc.def-123") == "Authorization: Bearer ***"
    assert mask('{"h": "bearer%20Zm9vOmJhcg=="}') == '{"h": "bearer ***"}'
    assert mask(f"key={json.dumps(KEY)[1:-1]}") == "key=***"
    for prose in ["the bearer of bad news", "Bearer tokens expire", "no secret here"]:
        assert mask(prose) == prose
    with pytest.raises(ConfigError, match="ex_post_reserve"):
        ProxyConfig(charge_ex_post=True, ex_post_reserve=1e308)


def test_credentials_in_the_upstream_url_are_refused_naming_no_secret():
    for url in ["http://user:hunter2@127.0.0.1:9", "https://tok3n@example.com/v1"]:
        with pytest.raises(ConfigError) as caught:
            ProxyConfig(upstream=url)
        assert "hunter2" not in str(caught.value) and "tok3n" not in str(caught.value)
        assert "credentials" in str(caught.value)
    with pytest.raises(ConfigError, match="ftp://"):
        ProxyConfig(upstream="ftp://127.0.0.1/v1")
    assert public_ledger_url("postgresql://ctx:hunter2@db:5432/l?sslmode=require") == \
        "postgresql://ctx:***@db:5432/l?sslmode=require"
    assert "hunter2" not in public_ledger_url("postgresql://db/l?user=a&password=hunter2")


def test_a_served_failure_tells_a_proxy_client_nothing_about_resume():
    """The served client's message ends with the command line's advice (``--resume``); the
    proxy's 504 keeps what failed and drops the advice."""
    client = ServedClient("http://127.0.0.1:9", options=ClientOptions(timeout=3.0))
    error = client._dead("/v1/completions", httpx.ReadTimeout(""))
    assert "--resume" in str(error)
    said = decoding_failed(error, served=True)
    assert said.status == 504 and "--resume" not in said.message
    assert "no answer within 3 s" in said.message


@pytest.mark.parametrize("refuse", [False, True])
def test_a_spent_document_is_kept_out_of_plain_cid(lm, tmp_path, refuse):
    """``"epsilon": null`` (plain CID at λ = 1, nothing charged) does not use a document whose
    budget is spent: dropped as a bounded answer drops it, or HTTP 429 with refuse."""
    budgets = Budgets(default=1.0)
    with audited(lm, tmp_path, budgets=budgets, unguaranteed="use",
                 on_exhausted="refuse" if refuse else "drop") as (url, ledger, _):
        ledger.reserve("spend", ["acct-7"], 1.0, budgets)
        ledger.settle("spend", 1.0)
        body = chat_body({"documents": DOCS, "lambda": 1.0, "epsilon": None}, max_tokens=3)
        resp = post(url, body)
        if refuse:
            assert resp.status_code == 429
            assert resp.json()["error"]["code"] == "budget_exhausted"
        else:
            assert resp.status_code == 200, resp.text
            info = resp.json()["ctxleak"]
            assert info["documents"] == ["acct-9"] and info["dropped"] == ["acct-7"]
        assert ledger.document("acct-7").spent == 1.0  # nothing more charged


@pytest.mark.parametrize("policy", ["refuse", "drop"])
def test_plain_cid_does_not_spend_a_budgeted_document_uncharged(lm, tmp_path, policy):
    """A client's ``ctxleak.lambda`` (no guarantee, not charged) cannot read a document with a
    budget: refused (HTTP 403, the default) or the document dropped, as the operator says; a
    document without a budget, and λ = 0 (which reads none), are answered as before."""
    budgets = Budgets(overrides={"acct-7": 1.0})
    config: dict[str, Any] = {} if policy == "refuse" else {"unguaranteed": "drop"}
    with audited(lm, tmp_path, budgets=budgets, **config) as (url, ledger, _):
        body = chat_body({"documents": DOCS, "lambda": 0.5}, max_tokens=3)
        resp = post(url, body)
        if policy == "refuse":
            assert resp.status_code == 403, resp.text
            error = resp.json()["error"]
            assert error["code"] == "uncharged_on_budgeted" and "acct-7" in error["message"]
            assert "acct-9" not in error["message"]
        else:
            assert resp.status_code == 200, resp.text
            info = resp.json()["ctxleak"]
            assert info["documents"] == ["acct-9"] and info["dropped"] == ["acct-7"]
            assert "acct-7" in info["warnings"][0]
        assert ledger.find("acct-7") is None  # nothing recorded, ex post included
        # bounded CID still reads it, charged
        body["ctxleak"] = {"documents": DOCS, "epsilon": 0.05}
        body["temperature"] = 1.0
        resp = post(url, body)
        assert resp.status_code == 200 and resp.json()["ctxleak"]["documents"] == \
            ["acct-7", "acct-9"]
        assert ledger.document("acct-7").spent > 0
        body["ctxleak"] = {"documents": DOCS, "lambda": 0.0}
        assert post(url, body).status_code == 200
    with pytest.raises(ConfigError, match="unguaranteed"):
        ProxyConfig(unguaranteed="allow")


def test_a_vanishing_epsilon_is_answered_not_a_500(lm, tmp_path):
    """ε = 5e-324 (the least float > 0) is a valid bounded-CID request: answered, charged, and
    its count of answers left is capped, not an overflow."""
    with audited(lm, tmp_path, budgets=Budgets(default=1.0)) as (url, ledger, _):
        body = chat_body({"documents": DOCS[:1], "epsilon": 5e-324}, max_tokens=3,
                         temperature=1.0)
        resp = post(url, body)
        assert resp.status_code == 200, resp.text
        assert ledger.document("acct-7").spent > 0
        # (a DP answer names no budget: issue 81) the count the operator's figures give
        assert answers_allowed(ledger.document("acct-7").remaining, 5e-324, 3) == 2 ** 53
        assert ledger.open_reservations() == []


def test_a_ledger_that_stops_answering_is_a_503_in_one_line(lm, tmp_path, caplog):
    """The ledger's store fails under a request (PostgreSQL down, SQLite's file gone): HTTP 503
    ``ledger_unavailable``, one log line and no traceback; nothing answered."""
    import sqlite3

    with audited(lm, tmp_path, budgets=Budgets(default=4.0)) as (url, ledger, _):
        def down(*args: Any, **kw: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        ledger.reserve = down
        ledger.classes_of = down
        body = chat_body({"documents": DOCS, "epsilon": 0.1}, max_tokens=3, temperature=1.0)
        with caplog.at_level("INFO", logger="ctxleak.proxy"):
            resp = post(url, body)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "ledger_unavailable"
        assert "OperationalError" in resp.json()["error"]["message"]
        assert not any(r.exc_info for r in caplog.records)


def _nested(depth: int) -> bytes:
    return b'{"model": "tiny", "x": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("raw,param", [
    (_nested(100), None),
    (_nested(200_000), None),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q"}], "ctxleak": {"documents": '
     b'[{"id": "a\\ud800", "text": "t"}], "lambda": 0.5}}', "ctxleak.documents[0].id"),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q"}], "ctxleak": {"documents": '
     b'[{"id": "a", "text": "t\\udc00x"}], "lambda": 0.5}}', "ctxleak.documents[0].text"),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q\\ud83d"}], "ctxleak": '
     b'{"documents": [{"id": "a", "text": "t"}], "lambda": 0.5}}', "messages[0].content"),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q"}], "ctxleak": {"documents": '
     b'[{"id": "a\\u0000b", "text": "t"}], "lambda": 0.5}}', "ctxleak.documents[0].id"),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q"}], "max_tokens": 8, '
     b'"temperature": 1, "ctxleak": {"documents": [{"id": "a", "text": "t"}], '
     b'"epsilon": 1e308}}', "ctxleak.epsilon"),
    (b'{"model": "t", "messages": [{"role": "user", "content": "q"}], "temperature": 1e-300, '
     b'"ctxleak": {"documents": [{"id": "a", "text": "t"}], "lambda": 0.5}}', "temperature"),
])
def test_bad_input_is_a_400_in_the_openai_shape(lm, tmp_path, raw, param):
    with audited(lm, tmp_path, budgets=Budgets(default=4.0)) as (url, ledger, _):
        resp = post(url, raw)
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param
        assert ledger.open_reservations() == [] and ledger.count() == 0


def test_health_says_unavailable_when_the_ledger_does_not_answer(lm, tmp_path):
    with audited(lm, tmp_path) as (url, ledger, _):
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        ledger.close()  # a store that is gone (a database restarted under a closed connection)
        resp = httpx.get(url + "/health")
        assert resp.status_code == 503 and resp.json()["status"] == "unavailable"


def test_a_client_that_never_sends_its_body_holds_no_slot(lm, tmp_path):
    """Headers sent, the body never: the request holds no --max-concurrent slot (another is
    answered meanwhile) and ends with HTTP 408 after body_timeout."""
    with audited(lm, tmp_path, max_concurrent=1, body_timeout=1.0) as (url, _, _):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: 500\r\n\r\n{")
            body = chat_body({"documents": DOCS, "lambda": 0.5}, max_tokens=2)
            assert post(url, body).status_code == 200
            slow.settimeout(30)
            answer = b""
            while b"}}" not in answer and (chunk := slow.recv(4096)):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert b"request_timeout" in answer


def test_ledger_file_is_private(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.reserve("r", ["d"], 1.0, Budgets())
    for path in [tmp_path / "l.db", tmp_path / "l.db-wal"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ledger.close()


def test_cli_serve_checks_before_loading_and_hides_secrets(monkeypatch, tmp_path, capsys):
    from typer.testing import CliRunner

    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    import ctxleak.proxy.budget as budget
    from ctxleak.cli.app import app, main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: calls.setdefault("lm", kw))
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    for argv, said in [(["--port", "70000"], "--port must be between 0 and 65535"),
                       (["--upstream", "ftp://127.0.0.1/v1"], "ftp://"),
                       (["--upstream", "http://u:hunter2@127.0.0.1:9", "--decode", "in-process"],
                        "credentials")]:
        with pytest.raises(SystemExit) as code:
            main(["serve", "--ledger", str(tmp_path / "a.db"), *argv])
        err = capsys.readouterr().err
        assert code.value.code == 2 and said in err and "hunter2" not in err
        assert "lm" not in calls  # refused before the model loads
    monkeypatch.setattr(budget, "open_ledger", lambda url: SQLiteLedger(tmp_path / "b.db"))
    result = CliRunner().invoke(app, ["serve", "--ledger", "postgresql://ctx:hunter2@db/l",
                                      "--host", "0.0.0.0", "--upstream", "http://127.0.0.1:9",
                                      "--upstream-timeout", "7"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "postgresql://ctx:***@db/l" in result.output
    assert "without an API key" in result.output
    assert calls["lm"]["request_timeout"] == 7.0  # CID through the upstream waits 7 s at most


def test_nan_from_the_upstream_is_a_502_and_the_ledger_stays_consistent(tmp_path):
    """An upstream whose distributions are NaN: HTTP 502 naming it (never a 500), no
    reservation left open, and what a bounded answer reserved kept as spent or given back
    (never more than its reservation)."""
    from helpers.fake_server import FakeVLLM

    class NaNVLLM(FakeVLLM):
        def _distort(self, logp: Any, mode: str | None) -> Any:
            logp = logp.clone()
            logp[..., 5] = float("nan")  # one token's log-prob in every distribution
            return logp

    with served_tiny(tmp_path, NaNVLLM) as (served, upstream):
        budgets = Budgets(default=10.0)
        with audited(served, tmp_path, upstream=upstream.url, budgets=budgets,
                     unguaranteed="use") as (url, ledger, _):
            for marked in [{"documents": DOCS, "lambda": 0.5},
                           {"documents": DOCS, "epsilon": 0.5}]:
                body = chat_body(marked, max_tokens=3, temperature=1.0)
                resp = post(url, body)
                assert resp.status_code == 502, resp.text
                assert resp.json()["error"]["type"] == "upstream_error"
            assert ledger.open_reservations() == []
            assert 0 <= ledger.document("acct-7").spent <= 0.5 * 4 + 1e-9


def test_an_answer_with_nan_figures_is_not_released_and_keeps_its_reservation(served, tmp_path):
    """Whatever lets NaN through to a decoded answer (here the served model's answer poisoned
    after decoding): HTTP 502 saying NaN, not a 500; the bounded answer's whole reservation
    (ε × (max_tokens + 1)) kept as spent, none left open."""
    from dataclasses import replace

    served, upstream = served
    with audited(served, tmp_path, upstream=upstream.url,
                 budgets=Budgets(default=10.0)) as (url, ledger, app):
        proxy = app.state.proxy
        answer_of = proxy._answer

        def poisoned(request: Any, docs: Any, listener: Any = None) -> Any:
            reply = answer_of(request, docs, listener)
            ledger = reply.answer.ledger
            first = replace(ledger.entries[0], logp_context=float("nan"))
            entries = (first, *ledger.entries[1:])
            return replace(reply, answer=replace(reply.answer, ledger=replace(
                ledger, entries=entries)))

        proxy._answer = poisoned
        body = chat_body({"documents": DOCS, "epsilon": 0.5}, max_tokens=3, temperature=1.0)
        resp = post(url, body)
        assert resp.status_code == 502, resp.text
        assert "NaN" in resp.json()["error"]["message"]
        assert ledger.open_reservations() == []
        assert ledger.document("acct-7").spent == pytest.approx(0.5 * 4)


def test_a_postgres_ledger_reconnects_after_a_restart():
    """PostgreSQL restarted under a connected ledger: /health's check opens the connection
    again and the next reservation is charged; while it is down the check says so."""
    from helpers.proxy_server import _run, postgres, postgres_tools

    why = postgres_tools()
    if why is not None:
        pytest.skip(why)
    from ctxleak.proxy.budget import PostgresLedger

    with postgres() as url:
        folder = url.split("host=", 1)[1]
        data = f"{folder}/data"
        ledger = PostgresLedger(url)
        budgets = Budgets(default=5.0)
        ledger.reserve("r1", ["a"], 1.0, budgets)
        _run(["pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
        assert "does not answer" in (ledger.check() or "")
        # what the proxy answers HTTP 503 ledger_unavailable for, in one line
        with pytest.raises(ledger.unavailable):
            ledger.reserve("down", ["a"], 1.0, budgets)
        with pytest.raises(ledger.unavailable):
            ledger.classes_of(["a"])
        _run(["pg_ctl", "-D", data, "-o", f"-k {folder} -c listen_addresses='' -c fsync=off",
              "-l", f"{folder}/log", "-w", "start"])
        assert ledger.check() is None
        assert ledger.reserve("r2", ["a"], 1.0, budgets).granted == ("a",)
        assert ledger.document("a").spent == 2.0
        # restarted again with no check between: the next reservation reconnects by itself
        _run(["pg_ctl", "-D", data, "-m", "immediate", "-w", "restart", "-o",
              f"-k {folder} -c listen_addresses='' -c fsync=off", "-l", f"{folder}/log"])
        assert ledger.reserve("r3", ["a"], 1.0, budgets).granted == ("a",)
        assert ledger.document("a").spent == 3.0
        ledger.close()
