"""The privacy proxy (``ctxleak serve``) from LlamaIndex: :class:`CtxleakQueryEngine`, a query
engine that retrieves with any LlamaIndex retriever and asks the proxy with the retrieved nodes
as the request's marked context (each with its id and class), answered under the proxy's
defence (bounded Context Influence Decoding: "Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", App. B, or another mechanism).

Needs ``llama-index-core`` and ``openai`` (``pip install "ctxleak[llamaindex]"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import openai
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import NodeWithScore

from ctxleak.integrations.marked import REFUSED, marked, refused, settings, spent_over

#: a parameter not sent (``openai.omit``; ``NOT_GIVEN`` before openai 1.99)
_OMIT: Any = getattr(openai, "omit", openai.NOT_GIVEN)
#: ``Response.metadata`` keys: the proxy's ``ctxleak`` field, and the ids and classes sent.
FIELD, SENT = "ctxleak", "ctxleak_sent"


def marked_nodes(nodes: Iterable[Any], *, class_key: str = "class",
                 id_key: str | None = None) -> list[dict[str, str]]:
    """The proxy's ``ctxleak.documents`` for LlamaIndex nodes (or ``NodeWithScore`` s): each
    node's text, its id (``metadata[id_key]``; ``id_key`` None: its ``node_id``) and
    ``metadata[class_key]`` as its class. LlamaIndex draws a random id for a node built
    without one, and the proxy keeps each budget by id: give nodes ids of your own
    (``TextNode(id_=…)``) or name a metadata key, or every re-indexing starts a fresh budget.
    A metadata id that is missing gets the SHA-256 digest of the text
    (:func:`~ctxleak.integrations.marked.stable_id`); a bad one is a one-line error."""
    out = []
    for k, item in enumerate(nodes):
        node = item.node if isinstance(item, NodeWithScore) else item
        meta = node.metadata or {}
        doc_id = meta.get(id_key) if id_key is not None else node.node_id
        out.append(marked(k, node.get_content(), doc_id, meta, class_key=class_key,
                          id_field=f"metadata[{id_key!r}]" if id_key else "node_id"))
    return out


class CtxleakQueryEngine(CustomQueryEngine):
    """Retrieve with ``retriever``, then ask ``ctxleak serve`` at ``base_url``
    (``http://HOST:PORT/v1``) the question with the nodes as marked context (:func:`marked_nodes`)
    at ``epsilon`` (bounded CID), ``cid_lambda`` or ``mechanism`` (none: the proxy's own). The
    :class:`Response` holds the answer, the retrieved nodes and, in its ``metadata``, the
    proxy's ``ctxleak`` field (:data:`FIELD`) and the ids and classes sent (:data:`SENT`). A
    request the proxy refuses (HTTP 400, 403) is a one-line
    :class:`~ctxleak.errors.InputError`."""

    retriever: Any
    base_url: str
    model: str = "default"
    api_key: str = "none"
    epsilon: float | None = None
    cid_lambda: float | None = None
    mechanism: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    class_key: str = "class"
    id_key: str | None = None

    def custom_query(self, query_str: str) -> Response:
        nodes = list(self.retriever.retrieve(query_str))
        documents = marked_nodes(nodes, class_key=self.class_key, id_key=self.id_key)
        body = {"documents": documents,
                **settings(self.epsilon, self.cid_lambda, self.mechanism)}
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        try:
            reply = client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": query_str}],
                extra_body={FIELD: body},
                max_tokens=_OMIT if self.max_tokens is None else self.max_tokens,
                temperature=_OMIT if self.temperature is None else self.temperature)
        except REFUSED as e:
            raise refused(e) from None
        finally:
            client.close()
        sent = [{k: v for k, v in d.items() if k != "text"} for d in documents]
        return Response(reply.choices[0].message.content, source_nodes=nodes,
                        metadata={FIELD: (reply.model_extra or {}).get(FIELD), SENT: sent})


def spent_by_document(responses: Iterable[Response]) -> dict[str, float]:
    """ε spent per private document over :class:`CtxleakQueryEngine` responses (what the
    proxy's ledger holds for them): each response's ``epsilon_spent`` added to every document
    it used that was sent with a class other than ``public``."""
    return spent_over(((r.metadata or {}).get(FIELD), (r.metadata or {}).get(SENT))
                      for r in responses)


__all__ = ["FIELD", "SENT", "CtxleakQueryEngine", "marked_nodes", "spent_by_document"]
