"""The privacy proxy's pass-through: a request without marked private context sent on to the
upstream OpenAI-compatible server as it came, and its answer returned as it came (streamed or
not); an upstream that is down, slow or answers what is not JSON gives HTTP 502 or 504."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from ctxleak.engine.served_client import public_url, tls_context
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.errors import secret_mask
from ctxleak.proxy.request import ProxyError


class Upstream:
    """The upstream server of ``config`` and the HTTP client that reaches it (opened with the
    first request, closed by :meth:`aclose`). What it answers is relayed with the upstream's
    API key and any Bearer token masked (:func:`~ctxleak.proxy.errors.secret_mask`)."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.http: httpx.AsyncClient | None = None
        self.mask = secret_mask(config.upstream_api_key)
        self.name = public_url(config.upstream) if config.upstream else "none"

    def _masked(self, content: bytes) -> bytes:
        """An answer's bytes with every secret masked (unchanged where there is none)."""
        text = content.decode("utf-8", errors="surrogateescape")
        out = self.mask(text)
        return content if out == text else out.encode("utf-8", errors="surrogateescape")

    async def _lines(self, resp: httpx.Response) -> AsyncIterator[bytes]:
        """A streamed answer relayed line by line (the events' framing kept), each masked."""
        async for line in resp.aiter_lines():
            yield self._masked(line.encode("utf-8", errors="surrogateescape")) + b"\n"

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.aclose()

    async def pass_through(self, raw: bytes, body: dict[str, Any]) -> Response:
        """The request sent on to the upstream's ``/v1/chat/completions`` as it came (a
        ``ctxleak`` field with no documents removed), and its answer returned as it came."""
        if self.config.upstream is None:
            raise ProxyError(400, "ctxleak: this proxy has no upstream for requests without "
                                  "marked context; mark the private context in "
                                  "ctxleak.documents", param="ctxleak")
        if "ctxleak" in body:
            body = {k: v for k, v in body.items() if k != "ctxleak"}
            raw = json.dumps(body).encode()
        resp = await self._send(raw)
        streamed = resp.headers.get("content-type", "").startswith("text/event-stream")
        if resp.status_code < 400 and streamed:
            return StreamingResponse(self._lines(resp), status_code=resp.status_code,
                                     media_type="text/event-stream",
                                     background=BackgroundTask(resp.aclose))
        return await self._whole(resp, "failed", shown=True)

    async def models(self) -> Response:
        """The upstream's ``GET /v1/models`` answer as it came (HTTP 502 or 504 when it is
        down, slow, failing or not JSON)."""
        return await self._whole(await self._send(None), "did not list its models")

    async def _whole(self, resp: httpx.Response, failed: str, shown: bool = False) -> Response:
        """The upstream's whole answer as it came, which must be JSON (else HTTP 502; too slow:
        504); an HTTP 5xx of the upstream is HTTP 502 saying it ``failed`` (with the start of
        its answer where ``shown``)."""
        try:
            content = await resp.aread()
        except httpx.TimeoutException as exc:
            raise ProxyError(504, f"the upstream {self.name} did not finish its "
                                  f"answer in {self.config.upstream_timeout:g} s",
                             kind="upstream_error", code="upstream_timeout") from exc
        finally:
            await resp.aclose()
        try:
            json.loads(content)
        except ValueError:
            raise ProxyError(502, f"the upstream {self.name} answered HTTP "
                                  f"{resp.status_code} with what is not JSON: "
                                  f"{self._masked(content)[:80]!r}", kind="upstream_error",
                             code="upstream_bad_answer") from None
        content = self._masked(content)
        if resp.status_code >= 500:
            said = f": {content[:200].decode(errors='replace')}" if shown else ""
            raise ProxyError(502, f"the upstream {self.name} {failed}: HTTP {resp.status_code}"
                                  f"{said}", kind="upstream_error", code="upstream_failed")
        return Response(content, status_code=resp.status_code, media_type="application/json")

    async def _send(self, raw: bytes | None) -> httpx.Response:
        """POST ``raw`` to the upstream's chat completions (None: GET its models), its
        answer's headers read (the body still to come)."""
        assert self.config.upstream is not None
        base = self.config.upstream.rstrip("/").removesuffix("/v1")
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=self.config.upstream_timeout,
                                          verify=tls_context())
        route = "/v1/chat/completions" if raw is not None else "/v1/models"
        headers = {"content-type": "application/json"}
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        request = self.http.build_request("POST" if raw is not None else "GET",
                                          base + route, content=raw, headers=headers)
        try:
            return await self.http.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise ProxyError(504, f"the upstream {self.name} did not answer in "
                                  f"{self.config.upstream_timeout:g} s",
                             kind="upstream_error", code="upstream_timeout") from exc
        except httpx.HTTPError as exc:
            raise ProxyError(502, f"the upstream {self.name} is unreachable: "
                                  f"{type(exc).__name__}: {self.mask(str(exc))}",
                             kind="upstream_error", code="upstream_unreachable") from exc
