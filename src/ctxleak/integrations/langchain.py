"""The privacy proxy (``ctxleak serve``) from LangChain: :class:`CtxleakChat`, a ``ChatOpenAI``
that sends a retriever's ``Document`` s as the request's marked context (each with its id and
class), and :func:`ctxleak_rag_chain`, a runnable question → retriever → answer through it.

The proxy answers with a defence (Context Influence Decoding, bounded per token as in
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", App. B, or
another mechanism) and charges each private document's budget; its ``ctxleak`` field (the
claim, ``epsilon_spent``, the ids used and dropped) comes back in the ``AIMessage``'s
``response_metadata["ctxleak"]``. :func:`spent_by_document` adds up, per private document, what
a list of answers says was spent: what the proxy's ledger holds for them.

Needs ``langchain-openai`` (``pip install "ctxleak[langchain]"``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_openai import ChatOpenAI

from ctxleak.errors import ConfigError
from ctxleak.integrations.marked import (
    PUBLIC,
    REFUSED,
    marked,
    refused,
    settings,
    spent_over,
    stable_id,
)

#: ``response_metadata`` keys: the proxy's ``ctxleak`` field, and the ids and classes sent.
FIELD, SENT = "ctxleak", "ctxleak_sent"


def marked_documents(documents: Iterable[Any], *, class_key: str = "class",
                     id_key: str | None = None) -> list[dict[str, str]]:
    """The proxy's ``ctxleak.documents`` for LangChain ``documents``: ``{"id", "text"}`` and
    ``"class"`` where ``metadata[class_key]`` has one (as the operator's classes file has it).
    The id is ``metadata[id_key]`` (``id_key`` None: the ``Document``'s own ``id``); a document
    without one gets :func:`~ctxleak.integrations.marked.stable_id` of its text. A non-string
    id or class, or an empty text, is a one-line :class:`~ctxleak.errors.InputError` naming the
    document and field."""
    out: list[dict[str, str]] = []
    for k, doc in enumerate(documents):
        if isinstance(doc, str):
            doc = Document(page_content=doc)
        meta = getattr(doc, "metadata", None) or {}
        doc_id = meta.get(id_key) if id_key is not None else getattr(doc, "id", None)
        out.append(marked(k, getattr(doc, "page_content", None), doc_id, meta,
                          class_key=class_key, text_field="page_content",
                          id_field=f"metadata[{id_key!r}]" if id_key is not None else "id"))
    return out


class CtxleakChat(ChatOpenAI):
    """``ChatOpenAI`` pointed at ``ctxleak serve`` (``base_url="http://HOST:PORT/v1"``) that
    sends ``documents=`` (``llm.invoke(question, documents=docs)``) as the marked context:
    :func:`marked_documents` of them with ``epsilon`` (bounded CID, ε per token), ``cid_lambda``
    (plain CID's λ, or bounded CID's cap) or ``mechanism`` (a spec such as ``"dp-rag:eps=5"``);
    none of the three: the proxy's own mechanism. Each answer's ``response_metadata`` holds the
    proxy's ``ctxleak`` field under :data:`FIELD` and the ids and classes sent under
    :data:`SENT`; a streamed answer's last chunk carries the field. A request the proxy refuses
    (HTTP 400: a class its classes file does not give, a duplicate id; HTTP 403: plain CID for a
    budgeted document) is a one-line :class:`~ctxleak.errors.InputError`."""

    epsilon: float | None = None
    cid_lambda: float | None = None
    mechanism: str | None = None
    class_key: str = "class"
    id_key: str | None = None

    def _marked(self, documents: Any) -> dict[str, Any]:
        return {"documents": marked_documents(documents, class_key=self.class_key,
                                              id_key=self.id_key),
                **settings(self.epsilon, self.cid_lambda, self.mechanism)}

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None,
                             **kwargs: Any) -> dict[str, Any]:
        documents = kwargs.pop("documents", None)
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if documents is not None:
            extra = dict(payload.get("extra_body") or {})
            extra[FIELD] = {**(extra.get(FIELD) or {}), **self._marked(documents)}
            payload["extra_body"] = extra
        return payload

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        sent = _sent(self, kwargs)
        try:
            result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        except REFUSED as e:
            raise refused(e) from None
        return _stamped(result, sent)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        sent = _sent(self, kwargs)
        chunks = super()._stream(messages, stop=stop, run_manager=run_manager, **kwargs)
        try:
            for k, chunk in enumerate(chunks):
                if k == 0 and sent is not None:
                    chunk.message.response_metadata[SENT] = sent
                yield chunk
        except REFUSED as e:
            raise refused(e) from None

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        sent = _sent(self, kwargs)
        try:
            result = await super()._agenerate(messages, stop=stop, run_manager=run_manager,
                                              **kwargs)
        except REFUSED as e:
            raise refused(e) from None
        return _stamped(result, sent)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: Any = None, **kwargs: Any
                       ) -> AsyncIterator[ChatGenerationChunk]:
        sent = _sent(self, kwargs)
        first = True
        try:
            async for chunk in super()._astream(messages, stop=stop, run_manager=run_manager,
                                                **kwargs):
                if first and sent is not None:
                    chunk.message.response_metadata[SENT] = sent
                first = False
                yield chunk
        except REFUSED as e:
            raise refused(e) from None

    def _create_chat_result(self, response: Any, generation_info: dict[str, Any] | None = None
                            ) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        field = _field_of(response)
        if field is not None:
            for gen in result.generations:
                gen.message.response_metadata[FIELD] = field
        return result

    def _convert_chunk_to_generation_chunk(self, chunk: dict[str, Any],
                                           default_chunk_class: type,
                                           base_generation_info: dict[str, Any] | None
                                           ) -> ChatGenerationChunk | None:
        out = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class,
                                                         base_generation_info)
        if out is not None and isinstance(chunk.get(FIELD), dict):
            out.message.response_metadata[FIELD] = chunk[FIELD]
        return out


def ctxleak_rag_chain(retriever: Any, llm: CtxleakChat) -> Runnable[str, BaseMessage]:
    """A runnable RAG chain over the privacy proxy: a question → ``retriever``'s documents →
    ``llm`` (a :class:`CtxleakChat`) asked the question with them as marked context; its output
    is the ``AIMessage`` (the answer's text, the proxy's ``ctxleak`` field in its
    ``response_metadata``)."""
    if not isinstance(llm, CtxleakChat):
        raise ConfigError(f"llm must be a CtxleakChat (it sends the documents), not "
                          f"{type(llm).__name__}", param="llm")

    def answer(question: str) -> BaseMessage:
        return llm.invoke(question, documents=retriever.invoke(question))

    async def aanswer(question: str) -> BaseMessage:
        return await llm.ainvoke(question, documents=await retriever.ainvoke(question))

    return RunnableLambda(answer, afunc=aanswer, name="ctxleak_rag_chain")


def spent_by_document(answers: Iterable[BaseMessage]) -> dict[str, float]:
    """ε spent per private document over ``answers`` (:class:`CtxleakChat` replies): each
    answer's ``epsilon_spent`` added to every document it used (not dropped) that was sent
    with a class other than ``public``. A document sent without a class that the operator's
    file makes public is counted here but not charged by the proxy: send the classes."""
    return spent_over((m.response_metadata.get(FIELD), m.response_metadata.get(SENT))
                      for m in answers)


def _sent(llm: CtxleakChat, kwargs: dict[str, Any]) -> list[dict[str, str]] | None:
    """The ids and classes (no text) of the documents a call sends, for :data:`SENT`
    (``kwargs["documents"]`` made a list: a generator is read once)."""
    documents = kwargs.get("documents")
    if documents is None:
        return None
    documents = kwargs["documents"] = list(documents)
    return [{k: v for k, v in d.items() if k != "text"}
            for d in llm._marked(documents)["documents"]]


def _stamped(result: ChatResult, sent: list[dict[str, str]] | None) -> ChatResult:
    """``result`` with the documents sent (:func:`_sent`) under :data:`SENT` in each
    answer's ``response_metadata``."""
    for gen in result.generations:
        if sent is not None:
            gen.message.response_metadata[SENT] = sent
    return result


def _field_of(response: Any) -> dict[str, Any] | None:
    """The proxy's ``ctxleak`` field of a chat completion (a dict or the openai model)."""
    if isinstance(response, dict):
        field = response.get(FIELD)
    else:
        field = (getattr(response, "model_extra", None) or {}).get(FIELD)
    return field if isinstance(field, dict) else None


__all__ = ["CtxleakChat", "FIELD", "PUBLIC", "SENT", "ctxleak_rag_chain", "marked_documents",
           "spent_by_document", "stable_id"]
