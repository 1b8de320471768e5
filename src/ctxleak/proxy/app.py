"""The privacy proxy's ASGI app: an OpenAI-compatible ``/v1/chat/completions`` that decodes a
request with marked private context by Context Influence Decoding (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded, ε per token: App. B,
Alg. 1), or by another defence (:mod:`~ctxleak.proxy.answering`: a DP vote, DP-RAG, scrubbing),
and charges each document's budget, and passes any other request to the upstream server
unchanged. Also ``/health``, ``/metrics`` (Prometheus) and ``/v1/models``.

Here the HTTP front (the key, the limits, the body) and the answer's course; beside it what each
part does: :mod:`~ctxleak.proxy.charging` (the budgets reserved and settled),
:mod:`~ctxleak.proxy.streaming` (a streamed answer), :mod:`~ctxleak.proxy.upstream` (the
pass-through) and :mod:`~ctxleak.proxy.errors` (failures as OpenAI-shaped HTTP errors)."""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import json
import logging
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from ctxleak.engine.capabilities import NEXT_TOKEN_DISTRIBUTION, check_capabilities
from ctxleak.engine.chat_prompt import has_chat_template
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, CtxleakError
from ctxleak.mitigations.cid_steps import CID_NEEDS
from ctxleak.mitigations.mechanisms import Listener
from ctxleak.proxy.answering import Reply, answer_alone, refusal
from ctxleak.proxy.batching import BatchDecoder
from ctxleak.proxy.bounds import check_messages, check_prompt
from ctxleak.proxy.budget import BudgetLedger, SQLiteLedger, open_ledger
from ctxleak.proxy.callers import Caller, RateLimited, RateLimiter, identify
from ctxleak.proxy.charging import Charging
from ctxleak.proxy.chat_request import ChatRequest, Document
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.errors import decoding_failed, error_response, unauthorised
from ctxleak.proxy.headers import answer_headers, stream_headers
from ctxleak.proxy.held import Held, budget_spent, caller_share_spent
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import ProxyError, is_marked, parse_body, parse_request
from ctxleak.proxy.routes import list_documents, list_models, one_document, timed
from ctxleak.proxy.streaming import Event, answer_and_settle, settle_released, sse_chunks
from ctxleak.proxy.upstream import Upstream
from ctxleak.proxy.view import client_view

log = logging.getLogger("ctxleak.proxy")
#: The slot of the request being handled, marked when a stream takes it over: a context
#: variable, so that the handler's slot reaches the stream without threading it through.
_SLOT: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("slot", default=None)


class Proxy:
    """The proxy's state: the model CID decodes with, the ledger's charging, the upstream, the
    settings, the metrics, and the requests being answered."""

    def __init__(self, lm: LanguageModel, ledger: BudgetLedger, config: ProxyConfig) -> None:
        self.lm, self.config = lm, config
        self.metrics = ProxyMetrics(ledger, config.metrics_documents,
                                    share=config.caller_share, rate=config.caller_rate)
        # each caller's requests a minute, counted in this process (replicas keep their own)
        self.limiter = None if config.caller_rate is None else RateLimiter(config.caller_rate)
        self.charging = Charging(ledger, config, self.metrics)
        self.upstream = Upstream(config)
        # an in-process model decodes the answers waiting together, one batch at a time (under
        # the model's lock); a served one answers several at once on its server
        self._model_lock = threading.Lock()
        self.batcher = None if lm.info.source == "served" else \
            BatchDecoder(lm, max_batch=config.max_concurrent, lock=self._model_lock)
        self._active = 0
        # past max_concurrent, up to max_queued requests wait for a slot in arrival order
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self._queued = 0
        # streamed answers still decoding, answers released and still being scored
        self._tasks: set[asyncio.Future[None]] = set()

    def _answer(self, request: ChatRequest, docs: Sequence[Document],
                listener: Listener | None = None) -> Reply:
        """The answer of ``request``'s mechanism, ``listener`` hearing its tokens as they are
        decided: in-process, in one ``answer_group`` call with the waiting requests its
        mechanism may decode together (:mod:`~ctxleak.proxy.batching`); a served model's,
        alone. The mechanism's refusal of the request is HTTP 400 naming the field."""
        try:
            if self.batcher is not None:
                return self.batcher.answer(request, docs, listener)
            return answer_alone(self.lm, request, docs, listener)
        except ConfigError as exc:
            if request.datastore is not None:  # the client's error names no reason: this does
                log.warning(json.dumps({"event": "mechanism_refused", "error": str(exc)}))
            raise refusal(exc, request) from None

    async def drain(self) -> None:
        """Wait for the answers still decoding or being scored, then stop the batch decoder."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.batcher is not None:
            await run_in_threadpool(self.batcher.close)

    async def answer(self, body: dict[str, Any], caller: Caller | None = None) -> Response:
        """A request with marked context answered by its mechanism, its budget reserved before
        decoding and settled after (:mod:`ctxleak.proxy.charging`), for ``caller`` (its share
        of each document's budget)."""
        check_messages(body.get("messages"), self.config)  # before any text is joined
        request = parse_request(body, self.config)
        await run_in_threadpool(check_prompt, self.lm, request)  # tokenised once, off the loop
        if request.seed is None:  # the answer's noise: a server secret, drawn once, so that
            # what it is charged before and how it is decoded after read the same draws
            request = replace(request, seed=secrets.randbits(63))
        rid = "chatcmpl-" + uuid.uuid4().hex
        held = await self.charging.reserve(rid, request, caller)
        least = request.mechanism.min_documents
        if len(held.docs) < least:  # budgets spent: too few documents left to answer from
            await self.charging.release_unspent(held)
            if held.over_share:  # the caller's share, not the documents' budgets
                raise caller_share_spent(self.config.caller_share)
            if request.datastore is not None:  # names no document of it, nor their count
                raise budget_spent(f"ctxleak.documents: too few documents of the datastore "
                                   f"have privacy budget left for {request.mechanism.key()} "
                                   f"to answer")
            raise budget_spent(f"ctxleak.documents: the privacy budget of document(s) "
                               f"{', '.join(held.dropped)} is spent, and "
                               f"{request.mechanism.key()} needs at least {least} "
                               f"documents ({len(held.docs)} left)")
        if request.stream:
            return await self._stream(request, held)
        try:
            reply = await run_in_threadpool(self._answer, request, held.docs)
        except Exception:
            await self.charging.release_unspent(held)  # nothing was released
            raise
        reply, info = await settle_released(self.charging, request, held, reply, self._tasks)
        view = client_view(info, request)  # what the client may read (the log has the rest)
        # the OpenAI ``chat.completion``, its ledger in the ``ctxleak`` field and in headers
        response = JSONResponse({
            "id": rid, "object": "chat.completion", "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": reply.finish_reason, "logprobs": None}],
            "usage": reply.usage, "ctxleak": view})
        response.headers.update(answer_headers(rid, view))
        return response

    async def _stream(self, request: ChatRequest, held: Held) -> Response:
        """A streamed answer, each token sent as its mechanism decides it (CID: as it is drawn;
        a mechanism that decodes the whole answer first: once it is whole;
        :mod:`ctxleak.proxy.streaming`). Answering and the settling of the budget run in a task
        of their own, so a client that goes away mid-answer changes nothing: what was drawn is
        charged. A failure before the first token is an HTTP error (nothing released, the
        reservation given back); after it, an ``error`` event, and the tokens already sent
        count as spent."""
        events: asyncio.Queue[Event] = asyncio.Queue()
        task = asyncio.ensure_future(answer_and_settle(self._answer, self.charging, request,
                                                       held, events, self._tasks))
        self._tasks.add(task)  # kept until done: the answer is settled whatever the client does
        # a streamed answer keeps its request's slot until it is decoded (released here, not
        # when the handler returns the stream)
        slot = _SLOT.get()
        if slot is not None:
            slot.append(True)

        def done(finished: asyncio.Future[None]) -> None:
            self._tasks.discard(finished)
            if slot is not None:
                self._active -= 1
                self._slots.release()

        task.add_done_callback(done)
        first = await events.get()
        if first[0] == "failed":
            raise first[1]
        return StreamingResponse(sse_chunks(self.lm, held.rid, request, first, events),
                                 media_type="text/event-stream",
                                 headers=stream_headers(request, held))

    # ---- the HTTP front -------------------------------------------------------------------
    def caller(self, request: Request, user: bool = True) -> Caller | None:
        """The request's caller (:func:`~ctxleak.proxy.callers.identify`), None when its key
        is none of the proxy's; ``user``: read the operator's ``caller_header`` too."""
        config = self.config
        header = config.caller_header if user else None
        return identify(request.headers.get("authorization", ""), config.api_key,
                        config.caller_keys, header,
                        None if header is None else request.headers.get(header))

    def authorised(self, request: Request) -> bool:
        return self.caller(request, user=False) is not None

    def admit(self, caller: Caller) -> None:
        """Count ``caller``'s request; HTTP 429 ``rate_limited`` (with ``Retry-After``) past
        its requests a minute (``caller_rate``), before anything is read, reserved or
        decoded."""
        self.metrics.caller_requests.labels(caller.label).inc()
        if self.limiter is not None:
            try:
                self.limiter.check(caller.name)
            except RateLimited:
                self.metrics.rate_limited.labels(caller.label).inc()
                raise

    def operator_refusal(self, request: Request) -> ProxyError | None:
        """Why ``request`` may not read the operator's views (the documents API, ``/metrics``'s
        per-document series), None where it may: it carries the operator's key
        (``operator_api_key``), or the proxy has neither key (a keyless development proxy,
        where anyone who reaches it reads them: docs/deploy-cid.md says so)."""
        key = self.config.operator_api_key
        if key is None and self.config.api_key is None:
            return None
        if key is None:
            return ProxyError(403, "the ledger's documents are the operator's and this proxy "
                                   "has no operator key: start ctxleak serve with "
                                   "--operator-key-env NAME and send that key",
                              kind="permission_error", code="operator_key_not_configured")
        if _bearer(request, key):
            return None
        if not request.headers.get("authorization"):
            return unauthorised()
        return ProxyError(403, "the ledger's documents are the operator's: send the operator "
                               "key (ctxleak serve --operator-key-env), not a client's",
                          kind="permission_error", code="operator_key_required")

    async def read_body(self, request: Request) -> bytes:
        """The request's body, at most ``max_body_bytes`` (HTTP 413) within ``body_timeout``
        seconds (HTTP 408: a client that sends its headers and never its body holds nothing
        longer)."""
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProxyError(413, f"the request body is {declared} bytes, more than the "
                                  f"proxy's limit of {limit}", code="request_too_large")
        chunks, size = [], 0
        try:
            with anyio.fail_after(self.config.body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ProxyError(413, f"the request body is more than the proxy's "
                                              f"limit of {limit} bytes", code="request_too_large")
                    chunks.append(chunk)
        except TimeoutError:
            raise ProxyError(408, f"the request body did not arrive within "
                                  f"{self.config.body_timeout:g} s", code="request_timeout"
                             ) from None
        return b"".join(chunks)

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``: the key checked, the body read (a slow body holds no
        slot), the concurrency limit checked; marked context answered by its mechanism, any
        other request passed through."""
        caller = self.caller(request)
        if caller is None:
            raise unauthorised()
        self.admit(caller)
        json_body(request)
        body, raw = parse_body(await self.read_body(request))
        async with self._slot():
            if not is_marked(body) and self.config.datastore is None:
                return await self.upstream.pass_through(raw, body)
            try:
                return await self.answer(body, caller)
            except self.charging.ledger.unavailable as exc:  # PostgreSQL down: one line
                log.error(json.dumps({"event": "ledger_unavailable", "error":
                                      f"{type(exc).__name__}: {str(exc).splitlines()[0:1]}"}))
                raise ProxyError(503, f"the budget ledger does not answer "
                                      f"({type(exc).__name__}): nothing was charged or "
                                      f"answered; try again later", kind="server_error",
                                 code="ledger_unavailable") from None
            except CtxleakError as exc:  # the request was read: the model or server failed
                raise decoding_failed(exc, self.lm.info.source == "served") from exc

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of ``max_concurrent`` slots, waited for in arrival order behind at most
        ``max_queued`` others; HTTP 429 when the queue is full too."""
        if self._slots.locked() and self._queued >= self.config.max_queued:
            raise ProxyError(429, f"the proxy is answering {self._active} requests and "
                                  f"{self._queued} more are waiting, its limits; try again "
                                  "later", kind="rate_limit_error", code="too_many_requests")
        self._queued += 1
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1
        self._active += 1
        handed = _SLOT.set([])  # a stream takes the slot over (:meth:`_stream`)
        try:
            yield
        finally:
            if not _SLOT.get():
                self._active -= 1
                self._slots.release()
            _SLOT.reset(handed)


def json_body(request: Request) -> None:
    """HTTP 415 unless the body is sent as ``application/json``: a web page may send a form or
    ``text/plain`` body to a local proxy without the browser's CORS preflight, and such a body
    read as JSON would let any page the operator visits spend the budgets of a keyless proxy."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ProxyError(415, f"the request body must be JSON sent with Content-Type: "
                              f"application/json, not {kind[:40] or 'no Content-Type'}",
                         param="content-type", code="unsupported_media_type")


class NoQueryString(logging.Filter):
    """Drops the query string from uvicorn's access-log lines: a key sent as ``?api_key=`` (which
    the proxy never reads) must not land in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def _bearer(request: Request, key: str) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer key`` (compared in constant time)."""
    given = request.headers.get("authorization", "")
    return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), key.encode())


def create_app(lm: LanguageModel, *, ledger: BudgetLedger | str | None = None,
               config: ProxyConfig | None = None) -> FastAPI:
    """The proxy as an ASGI app decoding with ``lm``: in-process, or a served model whose
    backend gives the whole next-token distribution (vLLM; any other is refused here).
    ``ledger``: a :class:`BudgetLedger`, a ledger URL (:func:`ctxleak.proxy.budget.open_ledger`)
    or None (a SQLite file ``ctxleak-ledger.db`` in the working folder)."""
    config = config or ProxyConfig()
    # a served model must give the whole next-token distribution (vLLM): refused before serving
    check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: CID_NEEDS}, what="the privacy proxy")
    if config.prompt_messages is not None and not has_chat_template(lm):
        raise ConfigError(f"prompt_messages: the model {lm.info.name} has no chat template to "
                          f"render the app's messages through: leave --prompt-messages out "
                          f"(ctxleak's template) or serve a chat model",
                          param="prompt_messages")
    if ledger is None:
        ledger = SQLiteLedger("ctxleak-ledger.db")
    elif isinstance(ledger, str):
        ledger = open_ledger(ledger)
    proxy = Proxy(lm, ledger, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if config.worker_threads is not None:  # the threads that decode and call the ledger
            anyio.to_thread.current_default_thread_limiter().total_tokens = \
                config.worker_threads
        yield
        await proxy.drain()
        await proxy.upstream.aclose()

    app = FastAPI(title="ctxleak privacy proxy", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.proxy = proxy

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await timed(proxy.metrics, "chat", lambda: proxy.chat(request),
                           proxy.upstream.mask)

    @app.get("/health")
    async def health() -> Response:
        """ok while the ledger answers (a PostgreSQL ledger reconnects first where its
        connection was lost); HTTP 503 otherwise, so a load balancer stops sending traffic."""
        problem = await run_in_threadpool(ledger.check)
        if problem is not None:
            return JSONResponse({"status": "unavailable", "ledger": problem}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Every series for the operator (:meth:`Proxy.operator_refusal`); to anyone else,
        those that count no document."""
        operator = proxy.operator_refusal(request) is None
        # the budget gauges read the ledger
        text = await run_in_threadpool(proxy.metrics.text, operator)
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if not proxy.authorised(request):
            return error_response(unauthorised())
        return await timed(proxy.metrics, "models", lambda: list_models(proxy.upstream, config))

    @app.get("/v1/ctxleak/documents")
    async def documents(request: Request) -> Response:
        refused = proxy.operator_refusal(request)
        if refused is not None:
            return error_response(refused)
        query = request.query_params
        return await timed(proxy.metrics, "documents", lambda: list_documents(
            ledger, query.get("offset"), query.get("limit"), proxy.config.composition))

    @app.get("/v1/ctxleak/documents/{doc_id:path}")
    async def document(request: Request, doc_id: str) -> Response:
        refused = proxy.operator_refusal(request)
        if refused is not None:
            return error_response(refused)
        return await timed(proxy.metrics, "documents", lambda: one_document(
            ledger, doc_id, proxy.config.composition))

    return app


def run_proxy(lm: LanguageModel, *, host: str = "127.0.0.1", port: int = 8100,
              ledger: BudgetLedger | str | None = None, config: ProxyConfig | None = None,
              log_level: str = "info") -> None:
    """Serve :func:`create_app` with uvicorn until interrupted; the request log (one JSON line
    per answer, the ``ctxleak.proxy`` logger) goes to standard error unless it has a handler.
    uvicorn's own logging configuration replaces every handler of the process, so it is used
    only where the process has configured none (``ctxleak serve``); a process that configured
    its logging (a service embedding the proxy) keeps it, and uvicorn's messages go through
    it."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, NoQueryString) for f in access.filters):
        access.addFilter(NoQueryString())
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(getattr(logging, log_level.upper(), logging.INFO))
    uvicorn.run(create_app(lm, ledger=ledger, config=config), host=host, port=port,
                log_level=log_level,
                log_config=None if logging.getLogger().handlers else LOGGING_CONFIG)
