"""The privacy proxy's ASGI app: an OpenAI-compatible ``/v1/chat/completions`` that decodes a
request with marked private context by Context Influence Decoding (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded, ε per token: App. B,
Alg. 1) and charges each document's budget, and passes any other request to the upstream server
unchanged. Also ``/health``, ``/metrics`` (Prometheus) and ``/v1/models``."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from ctxleak.engine.capabilities import NEXT_TOKEN_DISTRIBUTION, check_capabilities
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import CtxleakError
from ctxleak.mitigations.cid import CID_NEEDS
from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.budget import BudgetLedger, SQLiteLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import Answer, decode_answer
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import CIDRequest, Document, ProxyError, is_marked, parse_cid_request

log = logging.getLogger("ctxleak.proxy")

GUARANTEE = ("bounded CID: each released token (the stopping EOS included) is ε-DP with respect "
             "to any one document of the context, so this answer spends epsilon_spent of each "
             "document in documents (basic composition)")
NO_GUARANTEE = ("plain CID (a fixed λ) has no DP guarantee: epsilon_ex_post is 2·max_y |log "
                "p̄_λ(y|D) − log p(y|∅)| summed over tokens, a figure about this context alone "
                "(null at λ = 1 and T = 1 through a served model, whose server samples the "
                "answer itself)")


def _error(exc: ProxyError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _usage(answer: Answer) -> dict[str, int]:
    n_out = len(answer.ledger.response_ids)
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": n_out,
            "total_tokens": answer.prompt_tokens + n_out}


def _upstream_base(url: str) -> str:
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


class Proxy:
    """The proxy's state: the model CID decodes with, the ledger, the settings, the metrics."""

    def __init__(self, lm: LanguageModel, ledger: BudgetLedger, config: ProxyConfig) -> None:
        self.lm, self.ledger, self.config = lm, ledger, config
        self.metrics = ProxyMetrics()
        # one decoding at a time on an in-process model; a served one answers several at once
        self._model_lock: threading.Lock | nullcontext[None] = \
            nullcontext() if lm.info.source == "served" else threading.Lock()
        self._active = 0
        self._tasks: set[asyncio.Future[None]] = set()  # streamed answers still decoding
        self.http: httpx.AsyncClient | None = None

    # ---- CID ------------------------------------------------------------------------------
    def _decode(self, request: CIDRequest, docs: Any,
                on_entry: Callable[[LedgerEntry], None] | None = None) -> Answer:
        with self._model_lock:
            return decode_answer(self.lm, request, docs, on_entry)

    async def cid(self, body: dict[str, Any]) -> Response:
        request = parse_cid_request(body, self.config)
        rid = "chatcmpl-" + uuid.uuid4().hex
        ids, docs, dropped, charge = await self._reserve(rid, request)
        if request.stream:
            return await self._stream(rid, request, ids, docs, dropped, charge)
        try:
            answer = await run_in_threadpool(self._decode, request, docs)
        except Exception:
            if charge:  # nothing was released: the reservation is given back
                await run_in_threadpool(self.ledger.settle, rid, 0.0)
            raise
        info = await self._settle(rid, request, answer, ids, docs, dropped, charge)
        finish = "stop" if answer.ledger.stopped_on_eos else "length"
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": finish, "logprobs": None}],
            "usage": _usage(answer), "ctxleak": info})

    async def _reserve(self, rid: str, request: CIDRequest
                       ) -> tuple[list[str], list[Document], list[str], bool]:
        """Reserve the budget the answer may spend (bounded: ε per token the answer may
        release): (document ids, the documents kept, the ids dropped, whether it is charged)."""
        charge = request.eps is not None or self.config.charge_ex_post
        ids = list(dict.fromkeys(d.id for d in request.documents))
        kept = set(ids)
        if charge:
            amount = request.eps * (request.max_tokens + 1) if request.eps is not None else 0.0
            refuse = self.config.on_exhausted == "refuse"
            res = await run_in_threadpool(self.ledger.reserve, rid, ids, amount,
                                          self.config.budgets, all_or_nothing=refuse)
            if res.exhausted and refuse:
                raise ProxyError(429, f"the privacy budget of document(s) "
                                      f"{', '.join(res.exhausted)} is spent",
                                 param="ctxleak.documents", kind="insufficient_quota",
                                 code="budget_exhausted")
            kept = set(res.granted)
        dropped = [i for i in ids if i not in kept]
        self.metrics.dropped.inc(len(dropped))
        return ids, [d for d in request.documents if d.id in kept], dropped, charge

    async def _settle(self, rid: str, request: CIDRequest, answer: Answer, ids: list[str],
                      docs: list[Document], dropped: list[str], charge: bool
                      ) -> dict[str, Any]:
        """Charge what the answer spent, count it, log it; the response's ``ctxleak`` field."""
        bounded = request.eps is not None
        if bounded:
            assert answer.eps_spent is not None
            await run_in_threadpool(self.ledger.settle, rid, answer.eps_spent)
            self.metrics.eps.inc(answer.eps_spent * len(docs))
        else:
            ex_post = answer.eps_ex_post_total
            if charge:  # (the server sampled at λ = 1: no ex-post figure, nothing charged)
                await run_in_threadpool(self.ledger.settle, rid, ex_post or 0.0)
            if docs and ex_post is not None:
                await run_in_threadpool(self.ledger.record_ex_post, [d.id for d in docs],
                                        ex_post)
                self.metrics.eps_ex_post.inc(ex_post * len(docs))
        mode = "bounded" if bounded else "lambda"
        self.metrics.tokens.labels(mode).inc(len(answer.ledger.entries))
        kept = {d.id for d in docs}
        info = self._ledger_fields(request, answer, [i for i in ids if i in kept], dropped)
        log.info(json.dumps({"event": "cid", "id": rid, "mode": mode, "documents": info[
            "documents"], "dropped": dropped, "tokens": info["tokens"],
            "epsilon_spent": info["epsilon_spent"], "epsilon_ex_post": info["epsilon_ex_post"]}))
        return info

    async def _stream(self, rid: str, request: CIDRequest, ids: list[str],
                      docs: list[Document], dropped: list[str], charge: bool) -> Response:
        """A streamed answer, each token sent as it is drawn. Decoding and the settling of the
        budget run in a task of their own, so a client that goes away mid-answer changes
        nothing: what was drawn is charged. A failure before the first token is an HTTP error
        (nothing released, the reservation given back); after it, an ``error`` event, and the
        tokens already sent count as spent (bounded: ε each; else their ex-post ε)."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        drawn: list[LedgerEntry] = []

        def heard(entry: LedgerEntry) -> None:  # in the decoding thread
            drawn.append(entry)
            loop.call_soon_threadsafe(events.put_nowait, ("token", entry.token_id))

        async def decode_and_settle() -> None:
            outcome: tuple[str, Any] = ("failed", RuntimeError("the answer was not finished"))
            try:  # whatever happens, the stream hears how it ended
                try:
                    answer = await run_in_threadpool(self._decode, request, docs, heard)
                except Exception as exc:
                    outcome = ("failed", exc)
                    if charge:  # the tokens already sent are spent
                        spent = [e.eps if request.eps is not None else e.eps_ex_post
                                 for e in drawn]
                        await run_in_threadpool(self.ledger.settle, rid,
                                                float(sum(x or 0.0 for x in spent)))
                    return
                try:
                    info = await self._settle(rid, request, answer, ids, docs, dropped, charge)
                except Exception as exc:  # the ledger itself failed: the reservation stays open
                    outcome = ("failed", exc)
                    return
                outcome = ("done", (answer, info))
            finally:
                events.put_nowait(outcome)

        task = asyncio.ensure_future(decode_and_settle())
        self._tasks.add(task)  # kept until done: the answer is settled whatever the client does
        self._active += 1  # a streamed answer counts against the limit until it is decoded

        def done(finished: asyncio.Future[None]) -> None:
            self._tasks.discard(finished)
            self._active -= 1

        task.add_done_callback(done)
        first = await events.get()
        if first[0] == "failed":
            raise first[1]
        return StreamingResponse(self._chunks(rid, request, first, events),
                                 media_type="text/event-stream")

    def _ledger_fields(self, request: CIDRequest, answer: Answer, kept: list[str],
                       dropped: list[str]) -> dict[str, Any]:
        """The ``ctxleak`` field of the response: how to read it is in docs/deploy-cid.md."""
        ledger = answer.ledger
        return {
            "mode": "bounded" if request.eps is not None else "lambda",
            "lambda": request.lam, "epsilon": request.eps,
            "temperature": request.temperature, "seed": answer.seed,
            "epsilon_spent": answer.eps_spent,
            "epsilon_ex_post": answer.eps_ex_post_total,
            "influence": float(sum(e.influence for e in ledger.entries)),
            "guarantee": GUARANTEE if request.eps is not None else NO_GUARANTEE,
            "lambdas": ledger.lambdas,
            "token_ids": [e.token_id for e in ledger.entries],
            "tokens": len(ledger.entries), "stopped_on_eos": ledger.stopped_on_eos,
            "documents": kept, "dropped": dropped,
            "context_tokens_cut": answer.context_tokens_cut,
        }

    async def _chunks(self, rid: str, request: CIDRequest, first: tuple[str, Any],
                      events: asyncio.Queue[tuple[str, Any]]) -> AsyncIterator[str]:
        """The answer as OpenAI ``chat.completion.chunk`` server-sent events: the role, then a
        chunk for each drawn token as soon as its text is complete, then the finish reason with
        the ``ctxleak`` field (and the usage when asked), then ``[DONE]``. A failure mid-answer
        is an ``error`` event, as OpenAI's streams carry one."""
        created = int(time.time())

        def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            chunk = {"id": rid, "object": "chat.completion.chunk", "created": created,
                     "model": request.model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                  "logprobs": None}], **extra}
            return f"data: {json.dumps(chunk)}\n\n"

        yield event({"role": "assistant", "content": ""})
        ids: list[int] = []
        sent = ""
        stops = set(self.lm.eos_ids)
        kind, value = first
        while kind == "token":
            if value not in stops:  # the stopping EOS is no text
                ids.append(value)
                text = self.lm.decode(ids)
                if text.startswith(sent) and len(text) > len(sent):
                    yield event({"content": text[len(sent):]})
                    sent = text
            kind, value = await events.get()
        if kind == "failed":
            error = value if isinstance(value, ProxyError) else ProxyError(
                502 if self.lm.info.source == "served" else 500,
                f"decoding failed after {len(ids)} token(s): {value}", kind="upstream_error",
                code="decoding_failed")
            yield f"data: {json.dumps(error.body())}\n\n"
            yield "data: [DONE]\n\n"
            return
        answer, info = value
        if answer.text.startswith(sent) and len(answer.text) > len(sent):
            yield event({"content": answer.text[len(sent):]})
        finish = "stop" if answer.ledger.stopped_on_eos else "length"
        yield event({}, finish, ctxleak=info)
        if request.include_usage:  # OpenAI's last chunk: no choices, the usage
            usage = {"id": rid, "object": "chat.completion.chunk", "created": created,
                     "model": request.model, "choices": [], "usage": _usage(answer)}
            yield f"data: {json.dumps(usage)}\n\n"
        yield "data: [DONE]\n\n"

    # ---- pass-through ---------------------------------------------------------------------
    async def pass_through(self, raw: bytes, body: dict[str, Any]) -> Response:
        """The request sent on to the upstream's ``/v1/chat/completions`` as it came (a
        ``ctxleak`` field with no documents removed), and its answer returned as it came; an
        upstream that is down, slow or answers what is not JSON gives 502 or 504."""
        if self.config.upstream is None:
            raise ProxyError(400, "ctxleak: this proxy has no upstream for requests without "
                                  "marked context; mark the private context in "
                                  "ctxleak.documents", param="ctxleak")
        if "ctxleak" in body:
            body = {k: v for k, v in body.items() if k != "ctxleak"}
            raw = json.dumps(body).encode()
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=self.config.upstream_timeout)
        url = _upstream_base(self.config.upstream) + "/v1/chat/completions"
        headers = {"content-type": "application/json"}
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        try:
            resp = await self.http.send(self.http.build_request("POST", url, content=raw,
                                                                headers=headers), stream=True)
        except httpx.TimeoutException as exc:
            raise ProxyError(504, f"the upstream {self.config.upstream} did not answer in "
                                  f"{self.config.upstream_timeout:g} s",
                             kind="upstream_error", code="upstream_timeout") from exc
        except httpx.HTTPError as exc:
            raise ProxyError(502, f"the upstream {self.config.upstream} is unreachable: "
                                  f"{type(exc).__name__}: {exc}",
                             kind="upstream_error", code="upstream_unreachable") from exc
        streamed = resp.headers.get("content-type", "").startswith("text/event-stream")
        if resp.status_code < 400 and streamed:
            return StreamingResponse(resp.aiter_raw(), status_code=resp.status_code,
                                     media_type="text/event-stream",
                                     background=BackgroundTask(resp.aclose))
        try:
            content = await resp.aread()
        except httpx.TimeoutException as exc:
            raise ProxyError(504, f"the upstream {self.config.upstream} did not finish its "
                                  f"answer in {self.config.upstream_timeout:g} s",
                             kind="upstream_error", code="upstream_timeout") from exc
        finally:
            await resp.aclose()
        try:
            json.loads(content)
        except ValueError:
            raise ProxyError(502, f"the upstream {self.config.upstream} answered HTTP "
                                  f"{resp.status_code} with what is not JSON: "
                                  f"{content[:80]!r}", kind="upstream_error",
                             code="upstream_bad_answer") from None
        if resp.status_code >= 500:
            raise ProxyError(502, f"the upstream {self.config.upstream} failed: HTTP "
                                  f"{resp.status_code}: {content[:200].decode(errors='replace')}",
                             kind="upstream_error", code="upstream_failed")
        return Response(content, status_code=resp.status_code, media_type="application/json")

    # ---- the HTTP front -------------------------------------------------------------------
    def authorised(self, request: Request) -> bool:
        key = self.config.api_key
        if key is None:
            return True
        given = request.headers.get("authorization", "")
        return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(),
                                                                   key.encode())

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProxyError(413, f"the request body is {declared} bytes, more than the "
                                  f"proxy's limit of {limit}", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProxyError(413, f"the request body is more than the proxy's limit of "
                                      f"{limit} bytes", code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    async def chat(self, request: Request) -> Response:
        if not self.authorised(request):
            raise ProxyError(401, "a valid API key is needed: Authorization: Bearer KEY",
                             kind="authentication_error", code="invalid_api_key")
        if self._active >= self.config.max_concurrent:
            raise ProxyError(429, f"the proxy is answering {self._active} requests, its limit; "
                                  "try again later", kind="rate_limit_error",
                             code="too_many_requests")
        self._active += 1
        try:
            raw = await self.read_body(request)
            try:
                body = json.loads(raw)
            except ValueError:
                raise ProxyError(400, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise ProxyError(400, "the request body must be a JSON object")
            if not is_marked(body):
                return await self.pass_through(raw, body)
            try:
                return await self.cid(body)
            except ServerError as exc:
                slow = "timed out" in str(exc) or "timeout" in str(exc).lower()
                raise ProxyError(504 if slow else 502, f"the upstream failed: {exc}",
                                 kind="upstream_error",
                                 code="upstream_timeout" if slow else "upstream_failed") from exc
            except CtxleakError as exc:  # the request was read: the model or server failed
                served = self.lm.info.source == "served"
                raise ProxyError(502 if served else 500, f"decoding failed: {exc}",
                                 kind="upstream_error" if served else "server_error",
                                 code="decoding_failed") from exc
        finally:
            self._active -= 1


def create_app(lm: LanguageModel, *, ledger: BudgetLedger | str | None = None,
               config: ProxyConfig | None = None) -> FastAPI:
    """The proxy as an ASGI app decoding with ``lm``: in-process, or a served model whose
    backend gives the whole next-token distribution (vLLM; any other is refused here).
    ``ledger``: a :class:`BudgetLedger`, a ledger URL (:func:`ctxleak.proxy.budget.open_ledger`)
    or None (a SQLite file ``ctxleak-ledger.db`` in the working folder)."""
    from ctxleak.proxy.budget import open_ledger

    config = config or ProxyConfig()
    # a served model must give the whole next-token distribution (vLLM): refused before serving
    check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: CID_NEEDS}, what="the privacy proxy")
    if ledger is None:
        ledger = SQLiteLedger("ctxleak-ledger.db")
    elif isinstance(ledger, str):
        ledger = open_ledger(ledger)
    proxy = Proxy(lm, ledger, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if proxy.http is not None:
            await proxy.http.aclose()

    app = FastAPI(title="ctxleak privacy proxy", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.proxy = proxy

    def counted(route: str, response: Response, started: float) -> Response:
        proxy.metrics.requests.labels(route, str(response.status_code)).inc()
        proxy.metrics.seconds.labels(route).observe(time.perf_counter() - started)
        return response

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = await proxy.chat(request)
        except ProxyError as exc:
            log.info(json.dumps({"event": "refused", "status": exc.status, "param": exc.param,
                                 "code": exc.code}))
            response = _error(exc)
        except Exception as exc:  # a bug or a lost ledger: the OpenAI shape, no request text
            log.exception("the proxy failed on a request")
            response = _error(ProxyError(500, f"the proxy failed: {type(exc).__name__}",
                                         kind="server_error", code="internal_error"))
        return counted("chat", response, started)

    @app.get("/health")
    async def health() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(proxy.metrics.text(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if not proxy.authorised(request):
            return _error(ProxyError(401, "a valid API key is needed: Authorization: Bearer KEY",
                                     kind="authentication_error", code="invalid_api_key"))
        return JSONResponse({"object": "list", "data": [
            {"id": config.served_name, "object": "model", "owned_by": "ctxleak"}]})

    return app


def run_proxy(lm: LanguageModel, *, host: str = "127.0.0.1", port: int = 8100,
              ledger: BudgetLedger | str | None = None, config: ProxyConfig | None = None,
              log_level: str = "info") -> None:
    """Serve :func:`create_app` with uvicorn until interrupted; the request log (one JSON line
    per answer, the ``ctxleak.proxy`` logger) goes to standard error unless it has a handler."""
    import uvicorn

    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(getattr(logging, log_level.upper(), logging.INFO))
    uvicorn.run(create_app(lm, ledger=ledger, config=config), host=host, port=port,
                log_level=log_level)
