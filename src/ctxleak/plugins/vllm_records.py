"""The route that hands ctxleak an answer's records from its vLLM plugin: a vLLM ``--middleware``
(``ctxleak.plugins.vllm_records.records_route``) in the server's API process.

``GET /v1/ctxleak/pairs/{pair}`` answers the JSON the plugin wrote when the answer ended
(:mod:`ctxleak.plugins.protocol`: per token λ_t, log p̄_λ(y_t | D), log p(y_t | ∅) and bounded
CID's ex-post ε) and removes it: an answer's records are read once (by one reader, where two
ask at once). A pair it holds nothing for is HTTP 404 with the error type
``ctxleak_unknown_pair``, which tells a client that the route is there (the plugin may not be).
A records folder that is not the server's user's alone (:class:`RecordsFolder`) is HTTP 500
naming it, and nothing in it is read. Every other request goes on to vLLM unchanged.

The records' ``server`` flags (written by the engine that decoded the answer, its
``data_parallel_rank`` among them) get the number of data-parallel ranks this API server routes
to (:func:`data_parallel_ranks`), so that a client learns which ``X-data-parallel-rank``
headers it may send to keep an answer's two requests on one engine.

The pair id, 32 random hex digits the client drew, is what grants access, as a capability URL
does (the route runs before vLLM's own key check, as every middleware added after it does).
Standard library and Starlette only (vLLM's API server runs on Starlette).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ctxleak.plugins.protocol import (
    PAIR_ID,
    PAIRS_PATH,
    UNKNOWN_PAIR,
    RecordsFolder,
    RecordsFolderError,
)


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}},
                        status_code=status)


def data_parallel_ranks(app: Any) -> int | None:
    """How many data-parallel engines vLLM's API server (``app``) routes requests to, as its
    check of the ``X-data-parallel-rank`` header counts them (``InputProcessor``: the local
    engines where each node balances its own, all of them otherwise); None where the app holds
    no vLLM config."""
    config = getattr(getattr(app, "state", None), "vllm_config", None)
    parallel = getattr(config, "parallel_config", None)
    if parallel is None:
        return None
    local = bool(getattr(parallel, "local_engines_only", False))
    size = parallel.data_parallel_size_local if local else parallel.data_parallel_size
    return int(size or 1)


def read_records(pair: str) -> dict[str, Any] | None:
    """The records of ``pair`` (removed once read), or None where there are none; raises
    :class:`~ctxleak.plugins.protocol.RecordsFolderError` where the folder is unsafe."""
    return RecordsFolder(create=False).read(pair)


async def records_route(request: Request,
                        call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """vLLM middleware: serve ``GET /v1/ctxleak/pairs/{pair}``, pass everything else on."""
    path = request.url.path
    if not path.startswith(PAIRS_PATH):
        return await call_next(request)
    if request.method != "GET":
        return _error(405, "only GET reads a pair's records", "invalid_request_error")
    pair = path[len(PAIRS_PATH):]
    if not PAIR_ID.fullmatch(pair):
        return _error(400, "a pair id is 32 lowercase hex digits", "invalid_request_error")
    try:
        records = read_records(pair)
    except RecordsFolderError as exc:
        return _error(500, str(exc), "ctxleak_records_folder")
    if records is None:
        return _error(404, f"no records of pair {pair}: the answer is still running, was read "
                           "already, or the server runs without ctxleak's logits processor",
                      UNKNOWN_PAIR)
    ranks = data_parallel_ranks(request.scope.get("app"))
    if ranks is not None and isinstance(records.get("server"), dict):
        records["server"]["data_parallel_size"] = ranks
    return JSONResponse(records)
