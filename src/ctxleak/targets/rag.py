"""A RAG system the audit builds itself over a list of documents, as a :class:`~.base.Target`.

A membership attack ("Is My Data in Your Retrieval Database?", Anderson et al.; "Riddle Me
This!", Naseh et al.) needs documents that are *not* in the datastore, of the same kind as
those that are. An audit that builds the RAG system itself leaves held-out documents out of its
index: :class:`RAGApp` retrieves from the documents it is given (BM25 by default,
:mod:`.bm25`), fills the app's chat messages (the bundled Northwind prompt by default: the
retrieved documents joined by a blank line, best first, as ``{context}``, the question as
``{query}``) and has an :class:`Answerer` write the answer: a ctxleak model decoding with
Context Influence Decoding (:class:`~.model_answerer.ModelAnswerer`), or an OpenAI-compatible
endpoint (:class:`~.endpoint_answerer.EndpointAnswerer`, ``ctxleak serve`` included). Each
answer carries the ids and texts of the documents retrieved for it.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from ctxleak.engine.chat_prompt import Messages
from ctxleak.errors import ConfigError
from ctxleak.mitigations.bm25 import BM25, index
from ctxleak.targets.base import (
    OnAnswer,
    TargetAnswer,
    TargetError,
    code_identity,
    exit_words,
    no_exit,
)

#: The separator between retrieved documents in ``{context}`` (the RAG audit's).
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Document:
    """One document of the datastore: its id, its text and, where known, its source path
    (indexed with the text, as the bundled retriever does)."""

    id: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class RAGPrompt:
    """What an answerer gets for one question: the question, the retrieved documents (best
    first) and the app's chat messages with their ``{context}`` and ``{query}`` slots."""

    query: str
    documents: tuple[Document, ...]
    messages: Messages

    @property
    def context(self) -> str:
        """The retrieved documents' texts joined by a blank line, best first."""
        return SEPARATOR.join(d.text for d in self.documents)

    def filled(self, context: str | None = None) -> list[dict[str, str]]:
        """The messages with ``{context}`` (default: :attr:`context`) and ``{query}`` filled
        in, as OpenAI chat messages."""
        ctx = self.context if context is None else context
        return [{"role": role, "content": content.format(context=ctx, query=self.query)}
                for role, content in self.messages]


class Answerer(Protocol):
    """Writes one answer per prompt, in order: its text, or a :class:`~.base.TargetAnswer`
    whose text and claim the app keeps (an endpoint's, :mod:`.endpoint_answerer`); names
    itself without secrets. One that has ``reports_answers = True`` takes ``on_answer`` (index,
    answer), called as each is written."""

    def answer(self, prompts: Sequence[RAGPrompt]) -> Sequence[str | TargetAnswer]: ...

    def describe(self) -> str: ...

    def fingerprint(self) -> str: ...


#: A retriever of one's own: ``query -> documents`` (strings or dicts with ``id`` and
#: ``text``), best first.
Retriever = Callable[[str], Sequence[Any]]


def bundled_prompt() -> Messages:
    """The Northwind demo's chat messages (``data/demo/rag_audit/prompt.json``)."""
    return load_messages(json.loads(_demo_file("prompt.json")))


def load_messages(messages: Any) -> Messages:
    """Chat messages (a list of ``{"role", "content"}`` dicts or ``(role, content)`` pairs) as
    :data:`~ctxleak.engine.chat_prompt.Messages`, checked: ``{context}`` exactly once and
    ``{query}`` exactly once over all messages, no other slot."""
    try:
        pairs = tuple((m["role"], m["content"]) if isinstance(m, Mapping) else tuple(m)
                      for m in messages)
    except (TypeError, KeyError) as exc:
        raise ConfigError(f"prompt: expected chat messages with 'role' and 'content' ({exc})",
                          param="prompt") from None
    seen: list[str] = []
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise ConfigError("prompt: each message needs a string role and content",
                              param="prompt")
        try:
            seen += [f for _, f, _, _ in string.Formatter().parse(pair[1]) if f is not None]
        except ValueError as exc:
            raise ConfigError(f"prompt: {exc} in {pair[1]!r}", param="prompt") from None
    if sorted(seen) != ["context", "query"]:
        raise ConfigError(f"prompt: the messages must hold {{context}} and {{query}} once each "
                          f"and no other slot, not {sorted(seen)}", param="prompt")
    return pairs


def as_documents(documents: Sequence[Any], *, param: str = "documents") -> tuple[Document, ...]:
    """Documents given as strings (id = position) or dicts with ``text`` and optional ``id``
    and ``source``, checked: not empty, every id once."""
    out = []
    for k, doc in enumerate(documents):
        if isinstance(doc, Document):
            out.append(doc)
        elif isinstance(doc, str):
            out.append(Document(str(k), doc))
        elif isinstance(doc, Mapping) and isinstance(doc.get("text"), str):
            out.append(Document(str(doc.get("id", k)), doc["text"], str(doc.get("source") or "")))
        else:
            raise ConfigError(f"{param}[{k}]: expected a string or a dict with 'text', not "
                              f"{type(doc).__name__}", param=param)
    ids = [d.id for d in out]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ConfigError(f"{param}: the ids {twice[:5]} occur more than once", param=param)
    return tuple(out)


def fingerprint_of(*parts: Any) -> str:
    """A short stable hash (SHA-256, 16 hex digits) of JSON-able ``parts``."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RAGApp:
    """A RAG app over ``documents`` (strings, or dicts with ``id``, ``text``, ``source``):
    ``retriever`` (default BM25 over the documents, k1 = 1.2, b = 0.75) finds the ``top_k``
    best for a question, ``prompt`` (chat messages with ``{context}`` and ``{query}``; default
    the bundled Northwind prompt) holds them, ``answerer`` writes the answer."""

    def __init__(self, documents: Sequence[Any], *, answerer: Answerer,
                 retriever: Retriever | None = None, top_k: int = 3,
                 prompt: Any = None, name: str = "rag-app") -> None:
        if top_k < 1:
            raise ConfigError(f"top_k must be >= 1, not {top_k}", param="top_k")
        self.documents = as_documents(documents)
        if not self.documents:
            raise ConfigError("documents: a RAG app needs at least one document",
                              param="documents")
        self.answerer, self.retriever, self.top_k, self.name = answerer, retriever, top_k, name
        self.messages = bundled_prompt() if prompt is None else load_messages(prompt)
        self._index: BM25 | None = None if retriever is not None else index(
            [d.id for d in self.documents],
            [d.text + (" " + d.source if d.source else "") for d in self.documents])

    @property
    def model(self) -> Any:
        """The model that writes the answers where ctxleak holds it (a
        :class:`~.model_answerer.ModelAnswerer`'s or a mechanism's ``lm``), else None."""
        return getattr(self.answerer, "lm", None)

    def influence_note(self) -> str | None:
        """What context influence would add to a black-box audit of this app, where ctxleak
        holds its model (None where it does not)."""
        if self.model is None:
            return None
        return (f"ctxleak holds this app's model ({self.model.info.name}): `ctxleak influence` "
                "over the same documents and questions measures how much each retrieved "
                "document changed each answer's token probabilities (nats, leave-one-out, "
                "against a control), including leaks that no attack's answer shows")

    def retrieve(self, query: str) -> tuple[Document, ...]:
        """The ``top_k`` documents for ``query``, best first."""
        if self._index is not None:
            return tuple(self.documents[i] for i, _ in self._index.search(query, self.top_k))
        assert self.retriever is not None
        try:
            with no_exit():
                got = list(self.retriever(query))
        except SystemExit as exc:
            raise TargetError(f"the retriever of RAG app '{self.name}' {exit_words(exc)} on "
                              f"{query[:60]!r}") from None
        except Exception as exc:  # the user's retriever: any failure is its own
            raise ConfigError(f"retriever raised {type(exc).__name__} on {query[:60]!r}: {exc}",
                              param="retriever") from exc
        return as_documents(got[:self.top_k], param="retriever")

    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        prompts = [RAGPrompt(q, self.retrieve(q), self.messages) for q in questions]
        try:
            if on_answer is not None and getattr(self.answerer, "reports_answers", False):
                texts = self.answerer.answer(  # type: ignore[call-arg]
                    prompts, on_answer=lambda k, text: on_answer(k, _answer(text, prompts[k])))
            else:
                texts = self.answerer.answer(prompts)
                if on_answer is not None and len(texts) == len(prompts):
                    for k, (text, p) in enumerate(zip(texts, prompts)):
                        on_answer(k, _answer(text, p))
        except TargetError as exc:  # the answers had before it, with their documents
            exc.answered = {k: _answer(got, prompts[k]) for k, got in exc.answered.items()}
            raise
        return [_answer(text, p) for text, p in zip(texts, prompts, strict=True)]

    def describe(self) -> str:
        how = "BM25" if self._index is not None else "its own retriever"
        return (f"RAG app '{self.name}' over {len(self.documents)} documents ({how}, top "
                f"{self.top_k}) answered by {self.answerer.describe()}")

    def fingerprint(self) -> str:
        docs = sorted((d.id, d.text, d.source) for d in self.documents)
        how = "bm25(k1=1.2,b=0.75)" if self._index is not None else \
            f"retriever:{self.name}:{code_identity(self.retriever)}"
        return "rag:" + fingerprint_of(docs, how, self.top_k, self.messages,
                                       self.answerer.fingerprint())


def _answer(got: str | TargetAnswer, prompt: RAGPrompt) -> TargetAnswer:
    """An answerer's answer (its text, or its text and claim) with the prompt's documents."""
    text, claim = (got.text, got.claim) if isinstance(got, TargetAnswer) else (got, None)
    return TargetAnswer(text, tuple(d.id for d in prompt.documents),
                        tuple(d.text for d in prompt.documents), claim)


def _demo_file(name: str) -> str:
    return (resources.files("ctxleak") / "data" / "demo" / "rag_audit" / name).read_text("utf-8")


def demo_corpus() -> tuple[Document, ...]:
    """The bundled Northwind corpus (``data/demo/rag_audit/corpus.jsonl``): 15 fictional
    documents, public policies and private records with personal data."""
    rows = [json.loads(line) for line in _demo_file("corpus.jsonl").splitlines() if line.strip()]
    return as_documents(rows)


def demo_rag(answerer: Answerer, *, leave_out: Sequence[str] = (), top_k: int = 3) -> RAGApp:
    """:class:`RAGApp` over the bundled Northwind corpus with the bundled prompt, the
    documents whose ids are in ``leave_out`` left out of its index (a membership attack's
    non-members)."""
    docs = demo_corpus()
    unknown = sorted(set(leave_out) - {d.id for d in docs})
    if unknown:
        raise ConfigError(f"leave_out: {unknown[:5]} are not ids of the demo corpus",
                          param="leave_out")
    kept = [d for d in docs if d.id not in set(leave_out)]
    return RAGApp(kept, answerer=answerer, top_k=top_k, name="northwind-demo")


__all__ = ["SEPARATOR", "Answerer", "Document", "RAGApp", "RAGPrompt", "Retriever",
           "as_documents", "bundled_prompt", "demo_corpus", "demo_rag", "fingerprint_of",
           "load_messages"]
