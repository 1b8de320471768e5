"""The privacy proxy's marked context from any RAG framework's documents, and the ε each
private document was charged over a list of answers: what :mod:`ctxleak.integrations.langchain`
and :mod:`ctxleak.integrations.llamaindex` share. Imports no framework."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import openai

from ctxleak.errors import InputError

#: The class the proxy never charges (its operator's ``public`` documents).
PUBLIC = "public"
#: The proxy's refusals of what a request asks (a class, an id, a mechanism for a budgeted
#: document), raised as one-line errors; a 429 (a spent budget, a rate) stays the client's.
REFUSED = (openai.BadRequestError, openai.PermissionDeniedError)


def stable_id(text: str) -> str:
    """The id of a document that has none: ``sha256-`` and the first 16 hex digits of the
    SHA-256 of its UTF-8 text (the same text, the same id, in every process)."""
    return "sha256-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def marked(k: int, text: Any, doc_id: Any, meta: Mapping[str, Any], *, class_key: str,
           id_field: str, text_field: str = "text") -> dict[str, str]:
    """Document ``k`` as the proxy's ``{"id", "text", "class"}`` (``class`` where
    ``meta[class_key]`` has one; no id: :func:`stable_id` of the text). A non-string id or
    class, or an empty text, is a one-line :class:`~ctxleak.errors.InputError` naming the
    document and ``id_field``, ``text_field`` or the metadata key."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"document {k} has no text (a non-empty {text_field} is needed)",
                         field=text_field)
    if doc_id is None:
        doc_id = stable_id(text)
    elif isinstance(doc_id, bool) or not isinstance(doc_id, str) or not doc_id.strip():
        raise InputError(f"document {k}: the id must be a non-empty string, not {doc_id!r}",
                         field=id_field)
    out = {"id": doc_id, "text": text}
    cls = meta.get(class_key)
    if cls is not None:
        if not isinstance(cls, str) or not cls.strip():
            raise InputError(f"document {k} ({doc_id!r}): the class must be a class name of "
                             f"the proxy's classes file such as 'public', not {cls!r}",
                             field=f"metadata[{class_key!r}]")
        out["class"] = cls
    return out


def settings(epsilon: float | None, cid_lambda: float | None, mechanism: str | None
             ) -> dict[str, Any]:
    """The request's ``ctxleak`` settings besides its documents (none: the proxy's own
    mechanism)."""
    from ctxleak.errors import ConfigError

    if epsilon is not None and mechanism is not None:
        raise ConfigError("give epsilon (bounded CID) or mechanism, not both",
                          param="mechanism")
    return {key: value for key, value in (("epsilon", epsilon), ("lambda", cid_lambda),
                                          ("mechanism", mechanism)) if value is not None}


def spent_over(answers: Iterable[tuple[Any, Any]]) -> dict[str, float]:
    """ε spent per private document over ``answers``, each (the proxy's ``ctxleak`` field, the
    ids and classes sent): its ``epsilon_spent`` added to every document it used (not dropped)
    sent with a class other than ``public``."""
    total: dict[str, float] = {}
    for k, (field, sent) in enumerate(answers):
        if not isinstance(field, Mapping) or not isinstance(sent, Sequence):
            raise InputError(f"answer {k} has no ctxleak field and sent documents in its "
                             f"metadata (a reply of the proxy to a request with documents)",
                             field="response_metadata")
        spent = float(field.get("epsilon_spent") or 0.0)
        classes = {d["id"]: d.get("class") for d in sent}
        for doc_id in field.get("documents") or []:
            if classes.get(doc_id) != PUBLIC:
                total[doc_id] = total.get(doc_id, 0.0) + spent
    return total


def refused(error: openai.APIStatusError) -> InputError:
    """The proxy's refusal (HTTP 400 or 403) as one line naming the request field it names."""
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else body
    message = str(inner.get("message") or error.message)
    code, param = inner.get("code"), inner.get("param")
    line = re.sub(r"\s+", " ", f"ctxleak serve refused the request (HTTP {error.status_code}"
                               f"{', ' + str(code) if code else ''}): {message}").strip()
    return InputError(line, field=str(param) if param else None)


__all__ = ["PUBLIC", "REFUSED", "marked", "refused", "settings", "spent_over", "stable_id"]
