"""A fake vLLM API server in front of several data-parallel engines (``--data-parallel-size N``),
each a :class:`~helpers.fake_plugin.FakePluginVLLM` with ctxleak's plugin, for the fast tier.

It routes as vLLM's API server does: a ``/v1/completions`` request with the
``X-data-parallel-rank`` header goes whole to that engine (a rank outside [0, N) is HTTP 400, in
vLLM's words), one without it has each of its prompts sent to the next engine in turn (vLLM
sends each prompt, a request of its own to the engines, to the least loaded one; on idle engines
that is turn by turn), so an answer's two prompts land on two engines unless the client pins
them. The engines share one records dict, as the engines of one server share the plugin's
records folder, and ``GET /v1/ctxleak/pairs/{id}`` answers from it with the number of ranks
added to the flags, as ctxleak's records route does. Everything else goes to engine 0.
``routed`` keeps (pair id or None, engine index) per prompt sent on, ``headers_seen`` the
header of each request of a pair.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ctxleak.plugins.protocol import PAIRS_PATH, RANK_HEADER, UNKNOWN_PAIR
from helpers.fake_plugin import FakePluginVLLM


class FakeDataParallel:
    """``with FakeDataParallel(lm, ranks=2, never=...) as server: serve(..., server.url)``."""

    def __init__(self, lm: Any, *, ranks: int = 2, **kwargs: Any) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.engines = [FakePluginVLLM(lm, records=self.records,
                                       flags={"data_parallel_rank": k}, **kwargs)
                        for k in range(ranks)]
        self.turn = itertools.count()
        self.routed: list[tuple[str | None, int]] = []
        self.headers_seen: list[str | None] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def __enter__(self) -> FakeDataParallel:
        for engine in self.engines:
            engine.start()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _router(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for engine in self.engines:
            engine.stop()

    def completions(self, body: dict[str, Any], rank: str | None) -> tuple[int, Any]:
        """Route one completions request (the module docstring)."""
        pair = (body.get("vllm_xargs") or {}).get("ctxleak_pair")
        if pair is not None:
            with self._lock:
                self.headers_seen.append(rank)
        if rank is not None:
            try:
                k = int(rank)
            except ValueError:
                k = -1  # vLLM ignores a header it cannot read; here that is a test's bug
            if not 0 <= k < len(self.engines):
                return 400, {"error": {"message": f"data_parallel_rank {rank} is out of range "
                                                  f"[0, {len(self.engines)})."}}
            self._note(pair, k)
            return _post(self.engines[k].url + "/v1/completions", body)
        prompts = body["prompt"]
        if not prompts or isinstance(prompts[0], int):
            prompts = [prompts]
        choices = []
        for prompt in prompts:
            k = next(self.turn) % len(self.engines)
            self._note(pair, k)
            status, answer = _post(self.engines[k].url + "/v1/completions",
                                   {**body, "prompt": [prompt]})
            if status != 200:
                return status, answer
            for choice in answer["choices"]:
                choices.append({**choice, "index": len(choices)})
        return 200, {"id": "cmpl-fake-dp", "object": "text_completion",
                     "model": body.get("model"), "choices": choices}

    def _note(self, pair: str | None, rank: int) -> None:
        with self._lock:
            self.routed.append((pair, rank))

    def pair_records(self, pair: str) -> tuple[int, Any]:
        got = self.records.pop(pair, None)
        if got is None:
            return 404, {"error": {"message": "no records", "type": UNKNOWN_PAIR}}
        got["server"] = {**got["server"], "data_parallel_size": len(self.engines)}
        return 200, got


def _post(url: str, body: dict[str, Any] | None, method: str = "POST") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _router(server: FakeDataParallel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith(PAIRS_PATH):
                self._send(*server.pair_records(self.path[len(PAIRS_PATH):]))
            else:
                self._send(*_post(server.engines[0].url + self.path, None, "GET"))

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path == "/v1/completions":
                self._send(*server.completions(body, self.headers.get(RANK_HEADER)))
            else:
                self._send(*_post(server.engines[0].url + self.path, body))

    return Handler
