"""What a served model's client says about a server's answer it cannot use: the API key masked
wherever the server echoes it, a timeout with its limit (never an empty detail), and a redirect
named with where it points. A small HTTP server of the test's own on 127.0.0.1 answers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from ctxleak.engine.served_client import ClientOptions, ServedClient, ServerError

KEY = "sk-test-Zq81/x+y=secret"


@pytest.fixture
def answering():
    """``start(status, body, headers, delay)``: a server answering every request so; the
    request's Authorization header is put in the body where it holds ``{auth}``."""
    servers = []

    def start(status=200, body="{}", headers=(), delay=0.0):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                time.sleep(delay)
                auth = self.headers.get("Authorization") or ""
                data = body.replace("{auth}", auth).replace("{key}", auth[7:]).encode()
                try:
                    self.send_response(status)
                    for name, value in headers:
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._answer()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer()

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def _client(url, **options):
    return ServedClient(url, api_key=KEY, options=ClientOptions(attempts=1, backoff_s=0.0,
                                                                **options))


@pytest.mark.parametrize("status, body, headers", [
    (401, '{"error": "bad header: {auth}"}', ()),  # the example: a 401 echoing the header
    (403, "key {key} is not allowed", (("Content-Type", "text/plain"),)),
    (200, "<html>hello {key}</html>", (("Content-Type", "text/html"),)),  # not JSON
    (302, "", (("Location", "http://elsewhere/login?key={key}"),))])
def test_the_api_key_is_masked_in_what_a_server_echoes(answering, status, body, headers):
    headers = tuple((k, v.replace("{key}", KEY)) for k, v in headers)
    url = answering(status, body, headers)
    with pytest.raises(ServerError) as info:
        _client(url).get("/v1/models")
    assert KEY not in str(info.value) and "***" in str(info.value), str(info.value)


def test_the_api_key_is_masked_in_an_answer_read_from(answering):
    url = answering(200, json.dumps({"data": [{"id": "m", "owned_by": "{auth}",
                                              "note": "{key}"}]}))
    answer = _client(url).get("/v1/models")
    assert KEY not in json.dumps(answer) and answer["data"][0]["owned_by"] == "Bearer ***"


def test_a_read_timeout_says_its_limit(answering):
    url = answering(200, "{}", (), delay=2.0)
    with pytest.raises(ServerError) as info:
        _client(url, timeout=0.3).get("/v1/models")
    message = str(info.value)
    assert "ReadTimeout: no answer within 0.3 s" in message and "ReadTimeout: )" not in message


@pytest.mark.parametrize("exc, words", [
    (httpx.ConnectTimeout(""), "ConnectTimeout: no connection within"),
    (httpx.RemoteProtocolError(""), "RemoteProtocolError: no detail given")])
def test_an_empty_detail_is_never_printed_empty(exc, words):
    message = str(_client("http://127.0.0.1:9")._dead("/v1/models", exc))
    assert words in message and ": )" not in message, message


@pytest.mark.parametrize("status, location", [
    (302, "https://login.example/"),  # the example
    (301, "http://127.0.0.1:8001/v1/models"), (307, None)])
def test_a_redirect_is_named(answering, status, location):
    url = answering(status, "", (("Location", location),) if location else ())
    with pytest.raises(ServerError) as info:
        _client(url).post("/v1/completions", {"prompt": "x"})
    message = str(info.value)
    assert f"HTTP {status}" in message and "redirect" in message and "not JSON" not in message
    assert (location or "no Location") in message and info.value.status == status


ESCAPED = "".join(f"\\u{ord(c):04x}" for c in KEY)


@pytest.mark.parametrize("body", [
    f'{{"error": "bad key {ESCAPED}"}}',  # every character \\u-escaped, in an error
    f"key {KEY[:10]}\n{KEY[10:]} refused",  # split over two lines
    f'{{"error": {{"a": "{KEY[:9]}", "b": "{KEY[9:]}"}}}}'])  # split over two fields
def test_an_escaped_or_split_key_is_masked(answering, body):
    url = answering(401, body, (("Content-Type", "text/plain"),))
    with pytest.raises(ServerError) as info:
        _client(url).get("/v1/models")
    text = str(info.value)
    for part in (KEY[i:i + 8] for i in range(len(KEY) - 7)):
        assert part not in text, text
    assert "***" in text


def test_an_escaped_key_in_an_answer_read_from_is_masked(answering):
    url = answering(200, '{"data": [{"id": "m", "note": "' + ESCAPED + '"}]}')
    answer = _client(url).get("/v1/models")
    assert answer["data"][0]["note"] == "***"


def test_an_escaped_surrogate_in_an_error_stays_escaped(answering):
    url = answering(500, '{"error": "\\ud83d and ' + KEY + '"}')
    with pytest.raises(ServerError) as info:
        _client(url).get("/v1/models")
    str(info.value).encode("utf-8")  # printable: no lone surrogate
    assert "\\ud83d" in str(info.value) and KEY not in str(info.value)
