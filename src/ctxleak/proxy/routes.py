"""The privacy proxy's operator routes beside the chat completions: the ledger API
(``GET /v1/ctxleak/documents``, paged, and ``GET /v1/ctxleak/documents/{id}``, an unknown id
HTTP 404) and ``GET /v1/models`` (the upstream's models, else the proxy's own name), each timed
into the per-route latency histogram and answered in the OpenAI shape, errors included."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from ctxleak.proxy.budget import BudgetLedger, DocumentSpend
from ctxleak.proxy.composition import Composition
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.errors import answered
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import ProxyError
from ctxleak.proxy.upstream import Upstream

#: The most documents one page of the ledger API lists.
MAX_PAGE = 1000


async def timed(metrics: ProxyMetrics, route: str, handle: Callable[[], Awaitable[Response]],
                mask: Callable[[str], str] | None = None) -> Response:
    """``handle``'s response (its failure in the OpenAI shape, masked by ``mask``: see
    :func:`~ctxleak.proxy.errors.answered`), counted and timed by route."""
    started = time.perf_counter()
    response = await answered(handle, mask)
    metrics.requests.labels(route, str(response.status_code)).inc()
    metrics.seconds.labels(route).observe(time.perf_counter() - started)
    return response


def document_json(row: DocumentSpend, composition: Composition | None = None
                  ) -> dict[str, Any]:
    """A ledger row as the API gives it: ε figures per document (guaranteed ε charged, of which
    still reserved by answers being decoded, the ex-post ε of plain CID, the budget and what is
    left of it; null budget: no limit). Under Rényi composition the ledger's figures are Rényi
    divergences at its order (``unit``), and ``epsilon_spent`` and ``budget`` are the ε they
    guarantee at its δ."""
    comp = composition or Composition()
    out = {"object": "ctxleak.document", "id": row.doc_id, "class": row.doc_class,
           "unit": comp.unit(), "epsilon_spent": row.spent, "epsilon_reserved": row.reserved,
           "epsilon_ex_post": row.ex_post, "budget": row.budget, "remaining": row.remaining}
    if comp.renyi:
        out.update(renyi_spent=row.spent, renyi_reserved=row.reserved, renyi_budget=row.budget,
                   renyi_remaining=row.remaining, epsilon_spent=comp.epsilon(row.spent),
                   epsilon_reserved=None, remaining=None,
                   budget=None if row.budget is None else comp.epsilon(row.budget))
    return out


def _page_arg(value: str | None, name: str, default: int, high: int) -> int:
    if value is None:
        return default
    if not value.isdigit() or int(value) > high:
        raise ProxyError(400, f"{name}: must be an integer between 0 and {high}, not {value!r}",
                         param=name)
    return int(value)


async def list_documents(ledger: BudgetLedger, offset: str | None,
                         limit: str | None, composition: Composition | None = None) -> Response:
    """One page of the ledger's documents, in id order: ``data``, ``total`` and the
    ``next_offset`` to ask for (null on the last page)."""
    start = _page_arg(offset, "offset", 0, 1 << 62)
    size = _page_arg(limit, "limit", 100, MAX_PAGE)
    rows = await run_in_threadpool(ledger.documents, start, size)
    total = await run_in_threadpool(ledger.count)
    after = start + len(rows)
    return JSONResponse({"object": "list", "data": [document_json(r, composition) for r in rows],
                         "total": total, "offset": start, "limit": size,
                         "next_offset": after if after < total and rows else None})


async def one_document(ledger: BudgetLedger, doc_id: str,
                       composition: Composition | None = None) -> Response:
    """One document's row; HTTP 404 for an id the ledger has never seen."""
    row = await run_in_threadpool(ledger.find, doc_id)
    if row is None:
        raise ProxyError(404, f"document {doc_id!r} is not in the ledger (no answer has "
                              "reserved any of its budget)", param="document_id",
                         code="document_not_found")
    return JSONResponse(document_json(row, composition))


async def list_models(upstream: Upstream, config: ProxyConfig) -> Response:
    """The upstream's ``/v1/models`` as it answers it; without an upstream, the proxy's own
    model (``served_name``)."""
    if config.upstream is None:
        return JSONResponse({"object": "list", "data": [
            {"id": config.served_name, "object": "model", "owned_by": "ctxleak"}]})
    return await upstream.models()
