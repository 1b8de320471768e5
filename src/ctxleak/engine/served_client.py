"""The HTTP client of a served model: many requests in flight, retries, clear errors.

A run's requests go to the server together: :meth:`ServedClient.post_many` sends a list of JSON
bodies with at most ``max_in_flight`` of them open at once (an ``asyncio`` semaphore over one
``httpx.AsyncClient``), so the server's scheduler always has work to batch. Transient failures
(a refused or dropped connection, a timeout, HTTP 429 or 5xx) are retried with exponential
backoff by tenacity; what still fails becomes a :class:`ServerError` that names the server and
says how to finish the run (``--resume``: records are written per batch, so a run stopped by a
dead server loses only the batch in flight).

The API key is read from an environment variable (:data:`API_KEY_ENVS`) and kept only in the
request headers: it never enters an object that is serialised (``ServedInfo``, the config), and
where a server echoes it (in an error's text, a page that is not JSON, a field of an answer) it
is masked as ``***`` before anything is printed or stored. A redirect is named, not followed.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from ctxleak.engine.key_mask import key_forms, mask_key
from ctxleak.errors import CtxleakError

T = TypeVar("T")

#: Environment variables read for the server's API key, first set wins.
API_KEY_ENVS = ("CTXLEAK_API_KEY", "OPENAI_API_KEY")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
class ServerError(CtxleakError):
    """The server failed a request (after the retries) or answered what ctxleak cannot use.
    ``status``: the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class _Transient(Exception):
    """A response worth retrying (429, 5xx)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        super().__init__(f"HTTP {response.status_code}")


def public_url(url: str) -> str:
    """``url`` without credentials, query or trailing slash: what provenance records."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def api_key_from_env(env: str | None = None) -> str | None:
    """The API key from ``env`` (a variable name) or the first of :data:`API_KEY_ENVS` set."""
    for name in ([env] if env else list(API_KEY_ENVS)):
        value = os.environ.get(name)
        if value:
            return value
    return None


@dataclass(frozen=True)
class ClientOptions:
    """How the client talks to the server. ``timeout``: seconds for one request (the whole
    answer); ``attempts``: times a request is sent at most (the first try and the retries, so
    the user's ``retries`` plus one); ``max_in_flight``: requests open at once;
    ``prompts_per_request``: prompts batched into one completions request."""

    timeout: float = 600.0
    attempts: int = 4
    max_in_flight: int = 32
    prompts_per_request: int = 8
    backoff_s: float = 0.5


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings (its CA bundle; ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
    honoured), built once per process and shared by every client: building them reads the CA
    bundle, about 29 ms on a 2-core CPU, which each batch of requests paid when its client built
    its own (two per CID answer through the plugin: a 16-token answer took 502 ms, now 442)."""
    return httpx.create_ssl_context()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion, also from code already inside an event loop (a notebook):
    then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class ServedClient:
    """JSON over HTTP to one server (``base_url``, e.g. ``http://127.0.0.1:8000``; the
    ``/v1`` paths are added)."""

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 options: ClientOptions | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.options = options or ClientOptions()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._secrets = key_forms(api_key)

    def _shows_key(self, text: str) -> bool:
        """Whether ``text`` holds the key or a part of it, ``\\u``-escaped or not."""
        return mask_key(text, self._secrets) != text

    def _masked(self, text: str) -> str:
        """``text`` from the server with the API key, wherever it is echoed, as ``***``
        (:func:`mask_key`)."""
        return mask_key(text, self._secrets)

    @property
    def url(self) -> str:
        """The base URL without credentials."""
        return public_url(self.base_url)

    def _where(self, path: str) -> str:
        return f"the server at {self.url} ({path})"

    def _detail(self, exc: BaseException) -> str:
        """What went wrong, also when the exception's own text is empty (httpx's timeouts)."""
        text = self._masked(str(exc).strip().replace("\n", " "))
        if text:
            return text
        if isinstance(exc, httpx.TimeoutException):
            what = "connection" if isinstance(exc, httpx.ConnectTimeout) else "answer"
            limit = min(30.0, self.options.timeout) if what == "connection" \
                else self.options.timeout
            return f"no {what} within {limit:g} s, the request timeout"
        return "no detail given"

    def _dead(self, path: str, exc: BaseException) -> ServerError:
        return ServerError(
            f"{self._where(path)} did not answer after {self.options.attempts} "
            f"{'try' if self.options.attempts == 1 else 'tries'} "
            f"({type(exc).__name__}: {self._detail(exc)}): is it still running? Start it "
            "again; a run already begun keeps its finished examples, and rerunning the same "
            "command with --resume --output RUN_DIR finishes it")

    def _failed(self, path: str, response: httpx.Response) -> ServerError:
        text = self._masked(response.text).strip().replace("\n", " ")[:300]
        return ServerError(f"{self._where(path)} answered HTTP {response.status_code}: {text}",
                           status=response.status_code)

    def _redirected(self, path: str, response: httpx.Response) -> ServerError:
        """A 3xx: ctxleak does not follow it (the key would go wherever it points)."""
        target = response.headers.get("location")
        where = f" to {self._masked(target)}" if target else " (no Location given)"
        return ServerError(f"{self._where(path)} answered HTTP {response.status_code}, a "
                           f"redirect{where}, which ctxleak does not follow: give the server's "
                           "own base URL", status=response.status_code)

    async def _send(self, client: httpx.AsyncClient, method: str, path: str,
                    body: dict[str, Any] | None, headers: dict[str, str] | None = None) -> Any:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, self.options.attempts)),
            wait=wait_exponential(multiplier=self.options.backoff_s, max=30.0),
            retry=retry_if_exception(
                lambda e: isinstance(e, (httpx.TransportError, _Transient))),
            reraise=False)
        try:
            async for attempt in retrying:
                with attempt:
                    response = await client.request(method, self.base_url + path, json=body,
                                                    headers={**(headers or {}), **self._headers})
                    if response.status_code in RETRY_STATUS:
                        raise _Transient(response)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            if isinstance(last, _Transient):
                raise self._failed(path, last.response) from None
            raise self._dead(path, last or exc) from None
        if response.status_code >= 400:
            raise self._failed(path, response)
        if response.status_code >= 300:
            raise self._redirected(path, response)
        try:
            answer = response.json()
        except ValueError:
            kind = response.headers.get("content-type") or "no content type"
            raise ServerError(f"{self._where(path)} answered HTTP {response.status_code} with "
                              f"what is not JSON ({kind}): "
                              f"{self._masked(response.text)[:200]!r}") from None
        if self._secrets and self._shows_key(response.text):
            answer = self._masked_json(answer)  # nothing read from it may show the key
        return answer

    def _masked_json(self, value: Any) -> Any:
        """A JSON answer with every string (keys included) :meth:`_masked`."""
        if isinstance(value, str):
            return self._masked(value)
        if isinstance(value, list):
            return [self._masked_json(v) for v in value]
        if isinstance(value, dict):
            return {self._masked(k): self._masked_json(v) for k, v in value.items()}
        return value

    async def _many(self, method: str, path: str, bodies: Sequence[dict[str, Any] | None],
                    headers: Sequence[dict[str, str] | None] | None = None) -> list[Any]:
        return await self._each(method, [(path, b) for b in bodies], headers=headers)

    async def _each(self, method: str, calls: Sequence[tuple[str, dict[str, Any] | None]],
                    keep_errors: bool = False,
                    headers: Sequence[dict[str, str] | None] | None = None) -> list[Any]:
        """``method`` on each (path, body), at most ``max_in_flight`` open at once; the
        answers in order. ``keep_errors``: a failed call's :class:`ServerError` takes its place
        in the list; else the first failure cancels the rest and is raised. ``headers``: each
        call's own extra headers (the API key's header is always the client's)."""
        limit = asyncio.Semaphore(max(1, self.options.max_in_flight))
        timeout = httpx.Timeout(self.options.timeout, connect=min(30.0, self.options.timeout))
        limits = httpx.Limits(max_connections=max(1, self.options.max_in_flight))
        async with httpx.AsyncClient(timeout=timeout, limits=limits,
                                     verify=tls_context()) as client:
            async def one(path: str, body: dict[str, Any] | None,
                          extra: dict[str, str] | None) -> Any:
                async with limit:
                    try:
                        return await self._send(client, method, path, body, extra)
                    except ServerError as exc:
                        if keep_errors:
                            return exc
                        raise

            extras = list(headers) if headers is not None else [None] * len(calls)
            tasks = [asyncio.ensure_future(one(p, b, h)) for (p, b), h in zip(calls, extras)]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:  # the first failure cancels the rest
                    task.cancel()

    def post_many(self, path: str, bodies: Sequence[dict[str, Any]], *,
                  headers: Sequence[dict[str, str] | None] | None = None) -> list[Any]:
        """POST each body to ``path``; the JSON answers in order. ``headers``: extra headers
        of each request, in the order of ``bodies`` (e.g. vLLM's ``X-data-parallel-rank``)."""
        if not bodies:
            return []
        return _run(self._many("POST", path, list(bodies), headers))

    def get_each(self, paths: Sequence[str]) -> list[Any]:
        """GET each path at once; the JSON answers in order, a failed one's
        :class:`ServerError` in its place (the caller decides what a failure means)."""
        if not paths:
            return []
        return _run(self._each("GET", [(p, None) for p in paths], keep_errors=True))

    def post(self, path: str, body: dict[str, Any], *,
             headers: dict[str, str] | None = None) -> Any:
        return self.post_many(path, [body], headers=None if headers is None else [headers])[0]

    def get(self, path: str) -> Any:
        return _run(self._many("GET", path, [None]))[0]
