"""A fake OpenAI-compatible completions server in vLLM's dialect, backed by a tiny in-process
model, for the fast tier's served-model tests: no vLLM, no subprocess, ready in milliseconds.

It answers what :class:`ctxleak.engine.served.ServedLM` sends a real vLLM server, computed by
hand from the tiny model's logits (``log_softmax`` in float64 of one forward pass per sequence,
independent of ctxleak's engine):

- ``GET /health``, ``/v1/models`` (id, ``max_model_len``), ``/version``;
- ``POST /tokenize`` (the served tokenizer, which a test may replace to disagree);
- ``POST /v1/chat/completions``: a plain greedy chat answer (:meth:`FakeVLLM.chat`, streamed as
  server-sent events with ``stream``; of the
  faults, ``hang``, ``http`` and ``not-json``, counted with the completions requests);
- ``POST /v1/completions`` with token-id prompts and
  ``prompt_logprobs`` (log-prob of every prompt token, keyed by id), the OpenAI ``echo`` +
  ``logprobs`` form, ``allowed_token_ids`` (the raw, unrestricted log-prob of the allowed
  token), ``logprobs: k`` (the k most likely next tokens; ``-1`` or V: all of them), and
  sampling (``n``, ``seed`` + j for choice j, ``temperature`` 0 greedy, ``min_tokens``,
  ``stop_token_ids``, ``return_token_ids``) and beam search (``use_beam_search``: the ``n``
  best beams by summed log-prob, best first, a beam ending at the model's EOS).

``plain=True`` makes it a plain OpenAI-compatible server without vLLM's extensions: a request
carrying one of them (:data:`VLLM_ONLY`) is refused with HTTP 400, and there is no
``/tokenize``. ``max_logprobs`` refuses a request for more log-probs per position with HTTP 400,
as vLLM's ``--max-logprobs`` does.

Fault modes (:class:`Fault`), each after ``after`` good completion answers, so a run can start
well and fail mid-way: ``http`` (an HTTP status, 500 by default), ``not-json``, ``wrong-shape``
(JSON without ``choices``), ``uniform`` and ``positive`` log-probs, ``shifted`` ones (every
log-prob 3 nats too high: probabilities that sum to e³), ``nan`` (the most likely token's
log-prob NaN, written as JSON's ``NaN``), ``few-logprobs`` (at most
5 of the requested top log-probs per position), ``die`` (the server stops
listening and drops the request) and ``hang`` (the request is never answered until the server
stops). ``requests`` records every body the server saw.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

FAULTS = ("http", "not-json", "wrong-shape", "uniform", "positive", "shifted", "nan",
          "few-logprobs", "die", "hang")
#: The request fields of vLLM's extensions, which a plain OpenAI-compatible server refuses.
VLLM_ONLY = ("prompt_logprobs", "allowed_token_ids", "min_tokens", "stop_token_ids",
             "return_token_ids", "skip_special_tokens", "use_beam_search")


@dataclass
class Fault:
    """What goes wrong, from the ``after + 1``-th ``/v1/completions`` request on (``times``:
    how many requests fail before the server answers well again; None: all of them)."""

    mode: str
    after: int = 0
    status: int = 500
    times: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in FAULTS:
            raise ValueError(f"unknown fault {self.mode!r}: one of {FAULTS}")


class FakeVLLM:
    """The server: ``with FakeVLLM(lm) as server: serve(..., server.url, tokenizer=DIR)``.

    ``lm``: a ctxleak in-process LM (``.model``, ``.tokenizer``) whose weights answer.
    ``tokenize``: what ``/tokenize`` answers for a text (default: the model's own tokenizer).
    ``max_model_len``, ``root``: what ``/v1/models`` reports (``models_answer``: answered there
    instead, as it is, for a server that answers a wrong shape). ``never``: token ids never sampled (the
    tiny tokenizer's special tokens other than EOS, whose text does not encode back to them)."""

    def __init__(self, lm: Any, *, served_name: str = "tiny", fault: Fault | None = None,
                 tokenize: Callable[[str], list[int]] | None = None,
                 max_model_len: int = 256, never: tuple[int, ...] = (), plain: bool = False,
                 max_logprobs: int | None = None, root: str = "tiny",
                 models_answer: Any = None) -> None:
        self.lm = lm
        self.root = root  # /v1/models's "root": the weights the server says it loaded
        self.models_answer = models_answer  # answered to /v1/models instead of the listing
        self.served_name = served_name
        self.fault = fault
        self.tokenize = tokenize or (lambda text: list(
            lm.tokenizer(text, add_special_tokens=False)["input_ids"]))
        self.max_model_len = max_model_len
        self.never = never
        self.plain = plain
        self.max_logprobs = max_logprobs
        self.requests: list[tuple[str, dict[str, Any] | None]] = []
        self.completion_requests = 0  # /v1/completions requests answered or failed
        self.faulted = 0
        self._lock = threading.Lock()  # one forward pass at a time; counters
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url = ""

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (kept after the server stops, for the error messages)."""
        assert self._url, "not started"
        return self._url

    def start(self) -> FakeVLLM:
        handler = _handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (a hung request is released and its connection dropped)."""
        self._stop.set()
        if self._server is not None:
            server, self._server = self._server, None
            threading.Thread(target=server.shutdown, daemon=True).start()
            server.server_close()

    def __enter__(self) -> FakeVLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the model ------------------------------------------------------------------------
    def _logprobs(self, seq: list[int]) -> torch.Tensor:
        """``[len(seq), V]`` float64: row p is ``log p(· | seq[:p+1])``."""
        with self._lock, torch.no_grad():
            ids = torch.as_tensor([seq], dtype=torch.long)
            logits = self.lm.model(input_ids=ids).logits[0]
        return torch.log_softmax(logits.double(), dim=-1)

    def _distort(self, logp: torch.Tensor, mode: str | None) -> torch.Tensor:
        if mode == "uniform":
            return torch.full_like(logp, -math.log(logp.shape[-1]))
        if mode == "positive":
            return logp.abs() + 0.5
        if mode == "shifted":
            return logp + 3.0
        if mode == "nan":
            top = logp.argmax(dim=-1)
            logp = logp.clone()
            logp[torch.arange(logp.shape[0]), top] = math.nan
            return logp
        return logp

    def extra_get(self, path: str) -> tuple[int, Any] | None:
        """(status, JSON) of a GET route a subclass adds (None: no such route)."""
        return None

    # ---- answers --------------------------------------------------------------------------
    def completions(self, body: dict[str, Any], mode: str | None) -> dict[str, Any]:
        prompts = body["prompt"]
        if isinstance(prompts, str):
            prompts = [self.tokenize(prompts)]
        elif prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        choices: list[dict[str, Any]] = []
        n = int(body.get("n", 1))
        if body.get("use_beam_search"):
            for prompt in prompts:
                for beam in self._beams(list(map(int, prompt)), n, int(body["max_tokens"])):
                    choices.append({"index": len(choices), "text": "", "token_ids": beam,
                                    "finish_reason": "stop" if beam[-1:] and beam[-1] in
                                    self.lm.eos_ids else "length"})
            return {"id": "cmpl-fake", "object": "text_completion",
                    "model": body.get("model"), "choices": choices}
        for prompt in prompts:
            for j in range(n):
                choices.append(self._choice(body, list(map(int, prompt)),
                                            int(body.get("seed") or 0) + j, len(choices), mode))
        return {"id": "cmpl-fake", "object": "text_completion", "model": body.get("model"),
                "choices": choices}

    def _choice(self, body: dict[str, Any], prompt: list[int], seed: int, index: int,
                mode: str | None) -> dict[str, Any]:
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        key = (lambda t: f"token_id:{t}") if as_ids else (lambda t: str(t))
        new, finish = self._generate(body, prompt, seed)
        seq = prompt + new
        logp = self._distort(self._logprobs(seq), mode)  # row p predicts seq[p + 1]
        choice: dict[str, Any] = {"index": index, "text": "", "finish_reason": finish,
                                  "token_ids": new if body.get("return_token_ids") else None}
        if body.get("prompt_logprobs") is not None:
            rows: list[Any] = [None]
            k = int(body["prompt_logprobs"])
            for p in range(1, len(prompt)):
                row = {str(prompt[p]): {"logprob": float(logp[p - 1, prompt[p]]),
                                        "rank": 1, "decoded_token": ""}}
                if k:  # and the k most likely tokens, as vLLM answers prompt_logprobs: k
                    best = torch.topk(logp[p - 1], min(k, logp.shape[-1]))
                    row.update({str(int(t)): {"logprob": float(v), "rank": r + 1,
                                              "decoded_token": ""} for r, (v, t) in
                                enumerate(zip(best.values.tolist(), best.indices.tolist()))})
                rows.append(row)
            choice["prompt_logprobs"] = rows
            if body.get("return_token_ids"):
                choice["prompt_token_ids"] = prompt
        want = body.get("logprobs")
        if want is not None:
            echo = bool(body.get("echo"))
            first = 0 if echo else len(prompt)
            tokens = [key(t) for t in seq[first:]]
            values: list[float | None] = [None if p == 0 else float(logp[p - 1, seq[p]])
                                          for p in range(first, len(seq))]
            k = int(want)
            k = logp.shape[-1] if k < 0 else k
            k = min(k, 5) if mode == "few-logprobs" else k
            top: list[dict[str, float] | None] = []
            for p in range(first, len(seq)):
                if p == 0:
                    top.append(None)
                    continue
                best = torch.topk(logp[p - 1], min(k, logp.shape[-1])) if k else None
                entry = {key(seq[p]): float(logp[p - 1, seq[p]])}
                if best is not None:
                    entry.update({key(int(t)): float(v)
                                  for v, t in zip(best.values.tolist(), best.indices.tolist())})
                top.append(entry)
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": values,
                                  "top_logprobs": top, "text_offset": [0] * len(tokens)}
        return choice

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A plain chat completion: the messages' texts joined by spaces, tokenised, and
        ``max_tokens`` greedy new tokens (no chat template: enough for a pass-through test)."""
        text = " ".join(str(m.get("content") or "") for m in body.get("messages") or [])
        prompt = list(self.lm.bos_ids) + self.tokenize(text)
        new, finish = self._generate({**body, "temperature": 0}, prompt, 0)
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": finish, "message": {
                    "role": "assistant", "content": self.lm.decode(new)}}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(new),
                          "total_tokens": len(prompt) + len(new)}}

    def _beams(self, prompt: list[int], width: int, steps: int) -> list[list[int]]:
        """The ``width`` best continuations of at most ``steps`` tokens by summed log-prob
        (a beam that reaches EOS is finished and kept), best first."""
        live: list[tuple[float, list[int]]] = [(0.0, [])]
        done: list[tuple[float, list[int]]] = []
        for _ in range(steps):
            grown = []
            for score, new in live:
                logp = self._logprobs(prompt + new)[-1]
                best = torch.topk(logp, width)
                grown += [(score + float(v), new + [int(t)])
                          for v, t in zip(best.values.tolist(), best.indices.tolist())]
            grown.sort(key=lambda beam: -beam[0])
            live = []
            for score, new in grown[:width]:
                (done if new[-1] in self.lm.eos_ids else live).append((score, new))
            if not live:
                break
        return [new for _, new in sorted(done + live, key=lambda beam: -beam[0])[:width]]

    def _generate(self, body: dict[str, Any], prompt: list[int], seed: int
                  ) -> tuple[list[int], str]:
        """``max_tokens`` new tokens and the finish reason: greedy at temperature 0, else
        sampled with ``seed``; stop ids masked before ``min_tokens``; restricted to
        ``allowed_token_ids``."""
        steps = int(body.get("max_tokens", 16))
        temperature = float(body.get("temperature", 1.0))
        stops = set(int(t) for t in body.get("stop_token_ids") or [])
        allowed = body.get("allowed_token_ids")
        floor = int(body.get("min_tokens", 0))
        generator = torch.Generator().manual_seed(seed)
        seq, new, finish = list(prompt), [], "length"
        for t in range(steps):
            scores = self._logprobs(seq)[-1].clone()
            if allowed:
                mask = torch.full_like(scores, -math.inf)
                mask[list(map(int, allowed))] = 0.0
                scores = scores + mask
            for s in self.never:
                scores[s] = -math.inf
            if t < floor:
                for s in stops:
                    scores[s] = -math.inf
            if temperature == 0:
                tok = int(torch.argmax(scores))
            else:
                probs = torch.softmax(scores / temperature, dim=-1)
                tok = int(torch.multinomial(probs.float(), 1, generator=generator))
            new.append(tok)
            seq.append(tok)
            if tok in stops:
                finish = "stop"
                break
        return new, finish


def _handler(server: FakeVLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
            data = raw if raw is not None else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            server.requests.append((self.path, None))
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models" and server.models_answer is not None:
                self._send(200, server.models_answer)
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": server.served_name, "object": "model", "owned_by": "fake",
                     "root": server.root, "max_model_len": server.max_model_len}]})
            elif self.path == "/version":
                self._send(200, {"version": "fake-vllm"})
            elif (extra := server.extra_get(self.path)) is not None:
                self._send(*extra)
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            server.requests.append((self.path, body))
            if self.path == "/tokenize" and not server.plain:
                tokens = server.tokenize(body["prompt"])
                self._send(200, {"tokens": tokens, "count": len(tokens)})
                return
            if self.path == "/v1/chat/completions":  # faults: hang, http and not-json only
                mode = self._fault()
                if mode == "hang":
                    server._stop.wait()
                    self.close_connection = True
                elif mode == "http":
                    assert server.fault is not None
                    self._send(server.fault.status, {"error": {"message": "injected failure"}})
                elif mode == "not-json":
                    self._send(200, None, raw=b"<html>502 Bad Gateway</html>")
                elif body.get("stream"):
                    self._stream(server.chat(body))
                else:
                    self._send(200, server.chat(body))
                return
            if self.path != "/v1/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            if body.get("model") != server.served_name:
                self._send(404, {"error": {"message": f"The model `{body.get('model')}` "
                                                      "does not exist."}})
                return
            refused = self._refused(body)
            if refused:
                self._send(400, {"error": {"message": refused}})
                return
            mode = self._fault()
            if mode == "hang":
                server._stop.wait()
                self.close_connection = True
                return
            if mode == "die":
                server.stop()
                self.close_connection = True
                return
            if mode == "http":
                assert server.fault is not None
                self._send(server.fault.status, {"error": {"message": "injected failure"}})
                return
            if mode == "not-json":
                self._send(200, None, raw=b"<html>502 Bad Gateway</html>")
                return
            if mode == "wrong-shape":
                self._send(200, {"result": "no choices here"})
                return
            try:
                answer = server.completions(body, mode)
            except Exception as exc:  # a bug of the fake or a request it cannot read: say so
                self._send(400, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                return
            self._send(200, answer)

        def _stream(self, answer: dict[str, Any]) -> None:
            """A chat answer as OpenAI's server-sent events: one chunk per word, then the
            finish reason, then ``[DONE]``."""
            words = answer["choices"][0]["message"]["content"].split(" ")
            deltas = [{"role": "assistant", "content": ""}] + [
                {"content": w if k == 0 else " " + w} for k, w in enumerate(words)]
            events = [{"id": answer["id"], "object": "chat.completion.chunk", "created": 0,
                       "model": answer["model"], "choices": [{"index": 0, "delta": d,
                                                              "finish_reason": None}]}
                      for d in deltas]
            events[-1]["choices"][0]["finish_reason"] = answer["choices"][0]["finish_reason"]
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            raw = data.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _refused(self, body: dict[str, Any]) -> str | None:
            """Why a plain server or ``max_logprobs`` refuses the request (None: it does not)."""
            extra = [k for k in VLLM_ONLY if k in body] if server.plain else []
            if extra:
                return f"unknown fields {extra}"
            want = body.get("logprobs")
            if server.max_logprobs is not None and want is not None \
                    and (int(want) < 0 or int(want) > server.max_logprobs):
                return f"Requested log-probs of {want}, which is greater than max allowed: " \
                       f"{server.max_logprobs}"
            return None

        def _fault(self) -> str | None:
            with server._lock:
                server.completion_requests += 1
                fault = server.fault
                if fault is None or server.completion_requests <= fault.after:
                    return None
                if fault.times is not None and server.faulted >= fault.times:
                    return None
                server.faulted += 1
                return fault.mode

    return Handler


@contextmanager
def fake_vllm(lm: Any, **kwargs: Any) -> Iterator[FakeVLLM]:
    """A started :class:`FakeVLLM`, stopped on exit."""
    server = FakeVLLM(lm, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def plausible(lm: Any, text: str, steps: int = 60) -> Any:
    """``lm`` trained in place for a few steps on ``text`` (the served model's probe text) so
    that it scores it far better than uniform, as a real model scores English: a random tiny
    model does worse than uniform and is rightly refused by the check before a run."""
    ids = torch.as_tensor([lm.encode(text)])
    if lm.bos_ids:
        ids = torch.cat([torch.as_tensor([lm.bos_ids]), ids], dim=1)
    optimizer = torch.optim.Adam(lm.model.parameters(), lr=1e-2)
    lm.model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = lm.model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
    lm.model.eval()
    return lm
