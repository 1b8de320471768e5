"""How the privacy proxy's failures become HTTP errors in the OpenAI shape
(``{"error": {"message", "type", "param", "code"}}``, :class:`~ctxleak.proxy.request.ProxyError`):
a request refused, a model or server that failed while decoding (before the first token an
HTTP error; after it, in a stream, an ``error`` event), and a failure of the proxy itself,
answered without the request's text."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable

from starlette.responses import JSONResponse, Response

from ctxleak.engine.key_mask import key_pattern, mask_spelled
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import CtxleakError
from ctxleak.proxy.request import ProxyError

log = logging.getLogger("ctxleak.proxy")

#: A Bearer token as a server may echo an Authorization header (a space, ``%20`` or ``+``
#: after the word), masked whoever's it is: a token of RFC 6750's characters, at least 6 of them
#: with a digit or a symbol, so that prose ("the bearer of bad news") is left as it is.
_BEARER = re.compile(r"(?i)\b(bearer)(?:\s+|%20|\+)(?=[A-Za-z0-9._~+/-]{6})"
                     r"(?=[A-Za-z]*[0-9._~+/-])[A-Za-z0-9._~+/-]+=*")


def secret_mask(key: str | None = None) -> Callable[[str], str]:
    """What masks secrets in text the proxy relays or logs: the upstream's API key ``key``
    wherever it is echoed (plain, JSON-escaped, URL-encoded, reversed, hex-encoded, spelled
    out with spaces, punctuation or zero-width characters between its characters, in
    ``\\u`` escapes: :func:`~ctxleak.engine.key_mask.key_pattern`) and any Bearer token, each
    as ``***``."""
    pattern = key_pattern(key) if key else None

    def mask(text: str) -> str:
        return _BEARER.sub(r"\1 ***", mask_spelled(text, pattern, "***") if pattern else text)

    return mask


def masked(exc: ProxyError, mask: Callable[[str], str]) -> ProxyError:
    """``exc`` with its message masked (the same error when nothing needed it)."""
    message = mask(exc.message)
    if message == exc.message:
        return exc
    return ProxyError(exc.status, message, param=exc.param, kind=exc.kind, code=exc.code)


def error_response(exc: ProxyError) -> JSONResponse:
    """The error as an HTTP response: its status, the OpenAI error body, and the headers it
    carries (``Retry-After`` of :class:`~ctxleak.proxy.callers.RateLimited`)."""
    return JSONResponse(exc.body(), status_code=exc.status,
                        headers=getattr(exc, "headers", None))


def unauthorised() -> ProxyError:
    """HTTP 401: no API key, or not the proxy's."""
    return ProxyError(401, "a valid API key is needed: Authorization: Bearer KEY",
                      kind="authentication_error", code="invalid_api_key")


def _for_clients(text: str) -> str:
    """A served model's failure as a proxy client reads it: without the advice to rerun a
    command (``--resume``), which is for the command line, not for a client of the proxy."""
    text = text.split(": is it still running?")[0]
    return re.sub(r"[;,]?[^.;,:]*--resume[^.;]*", "", text)


def decoding_failed(exc: CtxleakError, served: bool) -> ProxyError:
    """A decoding that failed after the request was read: a served model's server that failed
    (502) or timed out (504), or the model itself (502 served, 500 in-process)."""
    if isinstance(exc, ServerError):
        slow = "timed out" in str(exc) or "timeout" in str(exc).lower()
        return ProxyError(504 if slow else 502, f"the upstream failed: "
                                                f"{_for_clients(str(exc))}",
                          kind="upstream_error",
                          code="upstream_timeout" if slow else "upstream_failed")
    return ProxyError(502 if served else 500, f"decoding failed: {exc}",
                      kind="upstream_error" if served else "server_error",
                      code="decoding_failed")


def failed_midway(exc: BaseException, sent: int, served: bool) -> ProxyError:
    """A streamed answer that failed after ``sent`` tokens: its ``error`` event's error (a
    :class:`ProxyError` as it is; anything else the model's or its server's failure)."""
    if isinstance(exc, ProxyError):
        return masked(exc, secret_mask())
    return ProxyError(502 if served else 500, secret_mask()(
                      f"decoding failed after {sent} token(s): {_for_clients(str(exc))}"),
                      kind="upstream_error",
                      code="decoding_failed")


async def answered(handle: Callable[[], Awaitable[Response]],
                   mask: Callable[[str], str] | None = None) -> Response:
    """``handle``'s response, or its failure in the OpenAI shape: a :class:`ProxyError` as it
    says, its message masked by ``mask`` (default :func:`secret_mask`; logged by status, param
    and code, never the request's text); anything else (a bug, a lost ledger) HTTP 500 naming
    only the exception's type, logged with its traceback."""
    try:
        return await handle()
    except ProxyError as exc:
        log.info(json.dumps({"event": "refused", "status": exc.status, "param": exc.param,
                             "code": exc.code}))
        return error_response(masked(exc, mask or secret_mask()))
    except Exception as exc:
        log.exception("the proxy failed on a request")
        return error_response(ProxyError(500, f"the proxy failed: {type(exc).__name__}",
                                         kind="server_error", code="internal_error"))
