"""The served-model client against a small HTTP server of the test's own on 127.0.0.1: retries
of transient failures, a clear error for an HTTP error, a dead server and a slow one, many
requests in flight, the API key sent in the header and never in what is stored."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ctxleak.engine.served_client import (
    ClientOptions,
    ServedClient,
    ServerError,
    api_key_from_env,
    public_url,
)


class Recorder:
    """What the handler saw and how it answers: ``script`` is a list of (status, delay s)
    taken in order, then 200 with no delay."""

    def __init__(self, script=()):
        self.script = list(script)
        self.seen: list[dict] = []
        self.lock = threading.Lock()
        self.open = 0
        self.most_open = 0


def serve_with(recorder: Recorder):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _answer(self, body):
            with recorder.lock:
                recorder.open += 1
                recorder.most_open = max(recorder.most_open, recorder.open)
                recorder.seen.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                status, delay = recorder.script.pop(0) if recorder.script else (200, 0.0)
            time.sleep(delay)
            data = json.dumps({"echo": body, "status": status}).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with recorder.lock:
                    recorder.open -= 1

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            self._answer(json.loads(self.rfile.read(length) or b"null"))

        def do_GET(self):
            self._answer(None)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


@pytest.fixture
def local():
    servers = []

    def start(script=()):
        recorder = Recorder(script)
        server = serve_with(recorder)
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", recorder

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


FAST = dict(backoff_s=0.01)


def test_answers_come_back_in_order_with_many_in_flight(local):
    url, rec = local([(200, 0.2)] * 8)
    client = ServedClient(url, options=ClientOptions(max_in_flight=8, **FAST))
    got = client.post_many("/v1/completions", [{"i": i} for i in range(8)])
    assert [g["echo"]["i"] for g in got] == list(range(8))
    assert rec.most_open > 1  # requests overlapped on the server, not one after another


def test_in_flight_is_bounded(local):
    url, rec = local([(200, 0.1)] * 6)
    client = ServedClient(url, options=ClientOptions(max_in_flight=2, **FAST))
    client.post_many("/x", [{"i": i} for i in range(6)])
    assert rec.most_open <= 2


def test_transient_errors_are_retried(local):
    url, rec = local([(503, 0.0), (429, 0.0)])
    client = ServedClient(url, options=ClientOptions(attempts=3, **FAST))
    assert client.post("/v1/completions", {"a": 1})["status"] == 200
    assert len(rec.seen) == 3


def test_a_lasting_server_error_names_the_status_after_the_retries(local):
    url, rec = local([(500, 0.0)] * 5)
    client = ServedClient(url, options=ClientOptions(attempts=2, **FAST))
    with pytest.raises(ServerError, match="HTTP 500") as info:
        client.post("/v1/completions", {"a": 1})
    assert info.value.status == 500
    assert len(rec.seen) == 2


def test_a_client_error_is_not_retried(local):
    url, rec = local([(400, 0.0)])
    client = ServedClient(url, options=ClientOptions(attempts=4, **FAST))
    with pytest.raises(ServerError, match="HTTP 400") as info:
        client.post("/v1/completions", {"a": 1})
    assert info.value.status == 400
    assert len(rec.seen) == 1


def test_a_slow_server_times_out_with_a_clear_error(local):
    url, _ = local([(200, 3.0)] * 3)
    client = ServedClient(url, options=ClientOptions(timeout=0.3, attempts=2, **FAST))
    t0 = time.time()
    with pytest.raises(ServerError, match="did not answer after 2 tries.*--resume"):
        client.post("/v1/completions", {"a": 1})
    assert time.time() - t0 < 3.0


def test_a_dead_server_says_how_to_finish_the_run():
    client = ServedClient("http://127.0.0.1:9", options=ClientOptions(attempts=2, **FAST))
    with pytest.raises(ServerError, match="is it still running.*--resume --output"):
        client.get("/v1/models")


def test_the_api_key_goes_in_the_header_only(local, monkeypatch):
    url, rec = local()
    monkeypatch.setenv("CTXLEAK_API_KEY", "sk-secret-123")
    client = ServedClient(url, api_key=api_key_from_env(), options=ClientOptions(**FAST))
    client.post("/v1/completions", {"a": 1})
    assert rec.seen[0]["auth"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in repr(vars(client.options)) and "sk-secret" not in client.url


def test_api_key_from_env_order(monkeypatch):
    monkeypatch.delenv("CTXLEAK_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert api_key_from_env() is None
    monkeypatch.setenv("OPENAI_API_KEY", "b")
    assert api_key_from_env() == "b"
    monkeypatch.setenv("CTXLEAK_API_KEY", "a")
    assert api_key_from_env() == "a"
    monkeypatch.setenv("MY_KEY", "c")
    assert api_key_from_env("MY_KEY") == "c"


def test_public_url_drops_credentials_and_query():
    assert public_url("https://user:pw@host.example:8443/v1/?token=x") == \
        "https://host.example:8443/v1"
    assert public_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"


def test_the_tls_settings_are_built_once_per_process(local, monkeypatch):
    """Building httpx's TLS settings reads the CA bundle (tens of ms); every batch of requests,
    from any client, shares one build, so a run of many small batches pays it once."""
    from ctxleak.engine import served_client

    built = []
    real = served_client.httpx.create_ssl_context
    monkeypatch.setattr(served_client.httpx, "create_ssl_context",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    served_client.tls_context.cache_clear()
    url, _ = local()
    for _ in range(3):
        client = ServedClient(url, options=ClientOptions(**FAST))
        assert client.post_many("/x", [{"i": 1}])[0]["echo"] == {"i": 1}
        assert client.get_each(["/y"])[0]["status"] == 200
    assert built == [1]
    served_client.tls_context.cache_clear()
