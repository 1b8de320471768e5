"""How the privacy proxy's failures become HTTP errors in the OpenAI shape
(``{"error": {"message", "type", "param", "code"}}``, :class:`~ctxleak.proxy.request.ProxyError`):
a request refused, a model or server that failed while decoding (before the first token an
HTTP error; after it, in a stream, an ``error`` event), and a failure of the proxy itself,
answered without the request's text."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from starlette.responses import JSONResponse, Response

from ctxleak.engine.served_client import ServerError
from ctxleak.errors import CtxleakError
from ctxleak.proxy.request import ProxyError

log = logging.getLogger("ctxleak.proxy")


def error_response(exc: ProxyError) -> JSONResponse:
    """The error as an HTTP response: its status, the OpenAI error body."""
    return JSONResponse(exc.body(), status_code=exc.status)


def unauthorised() -> ProxyError:
    """HTTP 401: no API key, or not the proxy's."""
    return ProxyError(401, "a valid API key is needed: Authorization: Bearer KEY",
                      kind="authentication_error", code="invalid_api_key")


def decoding_failed(exc: CtxleakError, served: bool) -> ProxyError:
    """A decoding that failed after the request was read: a served model's server that failed
    (502) or timed out (504), or the model itself (502 served, 500 in-process)."""
    if isinstance(exc, ServerError):
        slow = "timed out" in str(exc) or "timeout" in str(exc).lower()
        return ProxyError(504 if slow else 502, f"the upstream failed: {exc}",
                          kind="upstream_error",
                          code="upstream_timeout" if slow else "upstream_failed")
    return ProxyError(502 if served else 500, f"decoding failed: {exc}",
                      kind="upstream_error" if served else "server_error",
                      code="decoding_failed")


def failed_midway(exc: BaseException, sent: int, served: bool) -> ProxyError:
    """A streamed answer that failed after ``sent`` tokens: its ``error`` event's error (a
    :class:`ProxyError` as it is; anything else the model's or its server's failure)."""
    if isinstance(exc, ProxyError):
        return exc
    return ProxyError(502 if served else 500,
                      f"decoding failed after {sent} token(s): {exc}", kind="upstream_error",
                      code="decoding_failed")


async def answered(handle: Callable[[], Awaitable[Response]]) -> Response:
    """``handle``'s response, or its failure in the OpenAI shape: a :class:`ProxyError` as it
    says (logged by status, param and code, never the request's text); anything else (a bug, a
    lost ledger) HTTP 500 naming only the exception's type, logged with its traceback."""
    try:
        return await handle()
    except ProxyError as exc:
        log.info(json.dumps({"event": "refused", "status": exc.status, "param": exc.param,
                             "code": exc.code}))
        return error_response(exc)
    except Exception as exc:
        log.exception("the proxy failed on a request")
        return error_response(ProxyError(500, f"the proxy failed: {type(exc).__name__}",
                                         kind="server_error", code="internal_error"))
