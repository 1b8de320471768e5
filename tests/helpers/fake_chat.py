"""A scripted OpenAI-compatible chat server for the targets' tests: no model, no subprocess.

``POST /v1/chat/completions`` answers what its ``reply`` function returns for each request
(:class:`Reply`: status, body, headers, or ``hang`` until the server stops); by default a chat
completion whose text is ``"answer: "`` + the last user message. :func:`script` makes a reply
function from a list (one reply per request, in order, then the default). Every request's JSON
body and headers are recorded in ``requests``, in arrival order, so a test counts them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One HTTP answer: ``body`` a dict (sent as JSON) or bytes (sent as they are)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def completion(text: str | None, *, refusal: str | None = None,
               finish: str = "stop") -> dict[str, Any]:
    """A chat completion body with one choice."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": text, "refusal": refusal}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def echo(body: dict[str, Any], headers: dict[str, str]) -> Reply:
    """The default: "answer: " + the last user message."""
    users = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
    return Reply(body=completion("answer: " + (users[-1] if users else "")))


def script(replies: Sequence[Reply | None], then: Callable[..., Reply] = echo
           ) -> Callable[[dict[str, Any], dict[str, str]], Reply]:
    """Request k gets ``replies[k]`` (None: ``then``'s), and every request after them
    ``then``'s."""
    lock, seen = threading.Lock(), [0]

    def reply(body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with lock:
            k = seen[0]
            seen[0] += 1
        got = replies[k] if k < len(replies) else None
        return got if got is not None else then(body, headers)

    return reply


class FakeChat:
    """The server (see the module docstring); ``url`` is its ``/v1`` base address."""

    def __init__(self, reply: Callable[[dict[str, Any], dict[str, str]], Reply] = echo) -> None:
        self.reply = reply
        self.requests: list[tuple[dict[str, Any], dict[str, str]]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [body for body, _ in self.requests]

    def asked(self) -> list[str]:
        """The last user message of every request, in arrival order."""
        return [[m["content"] for m in b["messages"] if m["role"] == "user"][-1]
                for b in self.bodies()]


def _handler(server: FakeChat) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.loads(raw or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server.requests.append((body, headers))
            reply = server.reply(body, headers)
            if reply.hang:
                server.stopping.wait(60)
                return
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            kinds = {k.lower() for k in reply.headers}
            if "content-type" not in kinds:
                self.send_header("content-type", "application/json")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def fake_chat(reply: Callable[[dict[str, Any], dict[str, str]], Reply] = echo
              ) -> Iterator[FakeChat]:
    """A running :class:`FakeChat`, stopped (hanging requests released) on exit."""
    server = FakeChat(reply)
    server._thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server._httpd.shutdown()
        server._httpd.server_close()
