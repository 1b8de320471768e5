"""A proxy answer's ledger as response headers (``x-ctxleak-*``), for clients that see headers
but not the body's extra fields (LangChain's ``ChatOpenAI`` with
``include_response_headers=True``): the figures of what the client may read of the answer
(:func:`~ctxleak.proxy.view.client_view`, the one rule the body and the stream follow too),
an id list too long for a header given as its count."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxleak.proxy.chat_request import ChatRequest
from ctxleak.proxy.held import Held
from ctxleak.proxy.view import client_view

#: The longest JSON a header holds; a longer list is given as its count, the whole of it being
#: in the body: clients refuse response headers past about 16 KB (h11, which httpx and the
#: openai client use).
HEADER_JSON_LIMIT = 2048


def _header_json(value: Any) -> str:
    text = json.dumps(value)
    if len(text) <= HEADER_JSON_LIMIT:
        return text
    return json.dumps({"count": len(value), "listed": "in the response's ctxleak field"})


def _number(value: Any) -> str:
    return "none" if value is None else repr(float(value))


def _headers(rid: str, view: Mapping[str, Any], lists: tuple[str, ...]) -> dict[str, str]:
    """The headers every answer carries from its client's ``view``: its id, mode, how many
    warnings, the id lists and maps of ``lists`` (as JSON) and the mechanism where the view
    has them, and whether the client chose the seed."""
    out = {"x-ctxleak-request-id": rid, "x-ctxleak-mode": str(view["mode"]),
           "x-ctxleak-warnings": str(len(view.get("warnings") or []))}
    for name in lists:
        if name in view:
            out[f"x-ctxleak-{name.replace('_', '-')}"] = _header_json(view[name])
    if "mechanism" in view:
        out["x-ctxleak-mechanism"] = str(view["mechanism"])
    if view.get("seed_known"):
        out["x-ctxleak-seed-known"] = "true"
    return out


def answer_headers(rid: str, view: Mapping[str, Any]) -> dict[str, str]:
    """The headers of a released answer whose ``ctxleak`` field, as its client may read it, is
    ``view``: numbers as decimals (``none`` where there is none), id lists and the charges as
    JSON, each only where the view has it."""
    out = _headers(rid, view, ("documents", "dropped", "charged"))
    out["x-ctxleak-epsilon-spent"] = _number(view.get("epsilon_spent"))
    if "epsilon_ex_post" in view:
        out["x-ctxleak-epsilon-ex-post"] = _number(view["epsilon_ex_post"])
    if "mechanism" in view:
        out["x-ctxleak-delta-spent"] = _number(view.get("delta_spent"))
    return out


def stream_headers(request: ChatRequest, held: Held) -> dict[str, str]:
    """A streamed answer's headers, sent before its first token, as its client may read them
    (:func:`~ctxleak.proxy.view.client_view`): without a guarantee, the documents it uses and
    drops and what each charged document holds (the most the answer can be charged; the charge
    itself comes in the last chunk's ``ctxleak`` field); with one, its mode and mechanism (and,
    where the client sent its own documents, those kept and dropped)."""
    kept, mode = {d.id for d in held.docs}, request.mechanism.mode()
    view = client_view({"mode": mode, "documents": [i for i in held.ids if i in kept],
                        "dropped": held.dropped, "epsilon_reserved": dict(held.held),
                        "warnings": list(held.warnings), "seed_known": request.seed_known
                        and request.charge.guaranteed,
                        **({"mechanism": request.mechanism.key()} if mode == "mechanism"
                           else {})}, request)
    return _headers(held.rid, view, ("documents", "dropped", "epsilon_reserved"))


__all__ = ["HEADER_JSON_LIMIT", "answer_headers", "stream_headers"]
