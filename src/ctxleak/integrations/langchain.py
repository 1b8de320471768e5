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

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import openai
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_openai import ChatOpenAI

from ctxleak.errors import ConfigError, InputError

#: The class the proxy never charges (its operator's ``public`` documents).
PUBLIC = "public"
#: ``response_metadata`` keys: the proxy's ``ctxleak`` field, and the ids and classes sent.
FIELD, SENT = "ctxleak", "ctxleak_sent"
#: The proxy's refusals of what a request asks (a class, an id, a mechanism for a budgeted
#: document), raised as one-line errors; a 429 (a spent budget, a rate) stays the client's.
REFUSED = (openai.BadRequestError, openai.PermissionDeniedError)


def stable_id(text: str) -> str:
    """The id of a document that has none: ``sha256-`` and the first 16 hex digits of the
    SHA-256 of its UTF-8 text (the same text, the same id, in every process)."""
    return "sha256-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def marked_documents(documents: Iterable[Any], *, class_key: str = "class",
                     id_key: str | None = None) -> list[dict[str, str]]:
    """The proxy's ``ctxleak.documents`` for LangChain ``documents``: ``{"id", "text"}`` and
    ``"class"`` where ``metadata[class_key]`` has one (as the operator's classes file has it).
    The id is ``metadata[id_key]`` (``id_key`` None: the ``Document``'s own ``id``); a document
    without one gets :func:`stable_id` of its text. A non-string id or class, or an empty text,
    is a one-line :class:`~ctxleak.errors.InputError` naming the document and field."""
    out: list[dict[str, str]] = []
    for k, doc in enumerate(documents):
        if isinstance(doc, str):
            doc = Document(page_content=doc)
        text, meta = getattr(doc, "page_content", None), getattr(doc, "metadata", None) or {}
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"document {k} has no text (a langchain Document with a non-empty "
                             f"page_content is needed)", field="page_content")
        field = f"metadata[{id_key!r}]" if id_key is not None else "id"
        doc_id = meta.get(id_key) if id_key is not None else getattr(doc, "id", None)
        if doc_id is None:
            doc_id = stable_id(text)
        elif isinstance(doc_id, bool) or not isinstance(doc_id, str) or not doc_id.strip():
            raise InputError(f"document {k}: the id must be a non-empty string, not {doc_id!r}",
                             field=field)
        marked = {"id": doc_id, "text": text}
        cls = meta.get(class_key)
        if cls is not None:
            if not isinstance(cls, str) or not cls.strip():
                raise InputError(f"document {k} ({doc_id!r}): the class must be a class name "
                                 f"of the proxy's classes file such as 'public', not {cls!r}",
                                 field=f"metadata[{class_key!r}]")
            marked["class"] = cls
        out.append(marked)
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
        if self.epsilon is not None and self.mechanism is not None:
            raise ConfigError("give epsilon (bounded CID) or mechanism, not both",
                              param="mechanism")
        marked: dict[str, Any] = {"documents": marked_documents(
            documents, class_key=self.class_key, id_key=self.id_key)}
        for key, value in (("epsilon", self.epsilon), ("lambda", self.cid_lambda),
                           ("mechanism", self.mechanism)):
            if value is not None:
                marked[key] = value
        return marked

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
            raise _refused(e) from None
        for gen in result.generations:
            if sent is not None:
                gen.message.response_metadata[SENT] = sent
        return result

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
            raise _refused(e) from None

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

    return RunnableLambda(answer, name="ctxleak_rag_chain")


def spent_by_document(answers: Iterable[BaseMessage]) -> dict[str, float]:
    """ε spent per private document over ``answers`` (:class:`CtxleakChat` replies): each
    answer's ``epsilon_spent`` added to every document it used (not dropped) that was sent
    with a class other than ``public``. A document sent without a class that the operator's
    file makes public is counted here but not charged by the proxy: send the classes."""
    total: dict[str, float] = {}
    for k, message in enumerate(answers):
        meta = message.response_metadata
        field, sent = meta.get(FIELD), meta.get(SENT)
        if not isinstance(field, Mapping) or not isinstance(sent, Sequence):
            raise InputError(f"answer {k} has no ctxleak field and sent documents in its "
                             f"response_metadata (a CtxleakChat reply with documents)",
                             field="response_metadata")
        spent = field.get("epsilon_spent") or 0.0
        classes = {d["id"]: d.get("class") for d in sent}
        for doc_id in field.get("documents") or []:
            if classes.get(doc_id) != PUBLIC:
                total[doc_id] = total.get(doc_id, 0.0) + float(spent)
    return total


def _sent(llm: CtxleakChat, kwargs: dict[str, Any]) -> list[dict[str, str]] | None:
    """The ids and classes (no text) of the documents a call sends, for :data:`SENT`
    (``kwargs["documents"]`` made a list: a generator is read once)."""
    documents = kwargs.get("documents")
    if documents is None:
        return None
    documents = kwargs["documents"] = list(documents)
    return [{k: v for k, v in d.items() if k != "text"}
            for d in llm._marked(documents)["documents"]]


def _field_of(response: Any) -> dict[str, Any] | None:
    """The proxy's ``ctxleak`` field of a chat completion (a dict or the openai model)."""
    if isinstance(response, dict):
        field = response.get(FIELD)
    else:
        field = (getattr(response, "model_extra", None) or {}).get(FIELD)
    return field if isinstance(field, dict) else None


def _refused(error: openai.APIStatusError) -> InputError:
    """The proxy's refusal (HTTP 400 or 403) as one line naming the request field it names."""
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else body
    message = str(inner.get("message") or error.message)
    code, param = inner.get("code"), inner.get("param")
    line = re.sub(r"\s+", " ", f"ctxleak serve refused the request (HTTP {error.status_code}"
                               f"{', ' + str(code) if code else ''}): {message}").strip()
    return InputError(line, field=str(param) if param else None)


__all__ = ["CtxleakChat", "FIELD", "PUBLIC", "SENT", "ctxleak_rag_chain", "marked_documents",
           "spent_by_document", "stable_id"]
