"""A proxy answer's ledger as response headers (``x-ctxleak-*``), for clients that see headers
but not the body's extra fields (LangChain's ``ChatOpenAI`` with
``include_response_headers=True``): the figures of the response's ``ctxleak`` field, an id
list too long for a header given as its count."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxleak.proxy.charging import Held
from ctxleak.proxy.chat_request import ChatRequest

#: The longest JSON a header holds; a longer list (an answer over a datastore charges every
#: one of its documents) is given as its count, the whole of it being in the body: clients
#: refuse response headers past about 16 KB (h11, which httpx and the openai client use).
HEADER_JSON_LIMIT = 2048


def _header_json(value: Any) -> str:
    text = json.dumps(value)
    if len(text) <= HEADER_JSON_LIMIT:
        return text
    return json.dumps({"count": len(value), "listed": "in the response's ctxleak field"})


def answer_headers(rid: str, info: Mapping[str, Any]) -> dict[str, str]:
    """The ledger as response headers, for clients that see headers but not the body's extra
    fields (LangChain's ``ChatOpenAI`` with ``include_response_headers=True``): numbers as
    decimals (``none`` where there is none), id lists and the charges as JSON."""
    def number(value: Any) -> str:
        return "none" if value is None else repr(float(value))

    return {"x-ctxleak-request-id": rid, "x-ctxleak-mode": str(info["mode"]),
            "x-ctxleak-epsilon-spent": number(info["epsilon_spent"]),
            "x-ctxleak-epsilon-ex-post": number(info["epsilon_ex_post"]),
            "x-ctxleak-documents": _header_json(info["documents"]),
            "x-ctxleak-dropped": _header_json(info["dropped"]),
            "x-ctxleak-charged": _header_json(info["charged"]),
            "x-ctxleak-warnings": str(len(info.get("warnings") or [])),
            **({"x-ctxleak-mechanism": str(info["mechanism"]),
                "x-ctxleak-delta-spent": number(info["delta_spent"])}
               if "mechanism" in info else {})}


def stream_headers(request: ChatRequest, held: Held) -> dict[str, str]:
    """A streamed answer's headers, sent before its first token: the documents it uses and
    drops, and what each charged document holds (the most the answer can be charged; the
    charge itself comes in the last chunk's ``ctxleak`` field and in the ledger API)."""
    kept, mode = {d.id for d in held.docs}, request.mechanism.mode()
    return {"x-ctxleak-request-id": held.rid,
            "x-ctxleak-mode": mode,
            "x-ctxleak-documents": _header_json([i for i in held.ids if i in kept]),
            "x-ctxleak-dropped": _header_json(held.dropped),
            "x-ctxleak-epsilon-reserved": _header_json(dict(held.held)),
            "x-ctxleak-warnings": str(len(held.warnings)),
            **({"x-ctxleak-mechanism": request.mechanism.key()}
               if mode == "mechanism" else {})}


__all__ = ["HEADER_JSON_LIMIT", "answer_headers", "stream_headers"]
