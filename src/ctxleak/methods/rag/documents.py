"""Retrieved documents as the passages of a context ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.1 with the subset S = one retrieved document).

A RAG pipeline hands its model the documents a retriever returned for the query. Each becomes
one passage whose leave-one-out influence is measured (:mod:`.passages`), and keeps what names it:
its id, the source document it was cut from, its metadata, and its retrieval rank and score.

Items are recognised by their attributes, never by importing a framework:

* a string: the text, nothing else;
* a dict: ``text`` (or ``content``, ``page_content``), ``id``, ``source``, ``metadata`` (or
  ``meta``), ``score``;
* LangChain's ``Document``: ``page_content``, ``metadata``, ``id``;
* LlamaIndex's ``NodeWithScore`` (or a bare node): ``node.get_content()``, ``node.node_id`` (the
  chunk), ``node.ref_doc_id`` (the source document), ``node.metadata``, ``score``;
* Haystack's ``Document``: ``content``, ``id``, ``meta``, ``score``.

Where no ``source`` is given, ``metadata["source"]`` is taken when it is a string (LangChain's
loaders write the file there). The rank is the position in the retriever's list, from 1.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TEXT_KEYS = ("text", "content", "page_content")
META_KEYS = ("metadata", "meta")


class DocumentProblem(ValueError):
    """A retrieved item that cannot be a document: ``field`` names the field at fault (of the
    item, e.g. ``text``), the message says what is wrong."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class RetrievedDocument:
    """One retrieved document: its ``text`` (the passage), ``id`` (the document's or chunk's own
    id; None where the retriever gives none), ``source`` (the document it was cut from),
    ``metadata`` (JSON-safe: other values as their ``str``), ``rank`` (from 1, the retriever's
    order) and ``score`` (the retriever's; None where it gives none)."""

    text: str
    rank: int
    id: str | None = None
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The document as a plain dict, the form a JSONL row's ``documents`` field takes."""
        return {"id": self.id, "text": self.text, "source": self.source,
                "metadata": dict(self.metadata), "rank": self.rank, "score": self.score}


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` with only JSON types: a mapping's keys as strings, sequences as lists, numbers
    kept (NaN as None), anything else as its ``str`` (a date, a path, an enum)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if depth < 8 and isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


def _first(item: Mapping[str, Any], keys: Sequence[str]) -> tuple[str | None, Any]:
    return next(((key, item[key]) for key in keys if item.get(key) is not None), (None, None))


def _fields(item: Any) -> tuple[Any, Any, Any, Any, Any, str]:
    """(text, id, source, metadata, score, what the item is) read by attributes."""
    if isinstance(item, Mapping):
        _, text = _first(item, TEXT_KEYS)
        _, meta = _first(item, META_KEYS)
        return text, item.get("id"), item.get("source"), meta, item.get("score"), "dict"
    node = getattr(item, "node", None)
    if node is not None and hasattr(node, "node_id"):  # LlamaIndex NodeWithScore
        return (*_node_fields(node), getattr(item, "score", None), "LlamaIndex NodeWithScore")
    if hasattr(item, "node_id") and hasattr(item, "get_content"):  # a bare LlamaIndex node
        return (*_node_fields(item), None, "LlamaIndex node")
    if hasattr(item, "page_content"):  # LangChain Document
        return (item.page_content, getattr(item, "id", None), None,
                getattr(item, "metadata", None), None, "LangChain Document")
    if hasattr(item, "content") and hasattr(item, "meta"):  # Haystack Document
        return (item.content, getattr(item, "id", None), None, item.meta,
                getattr(item, "score", None), "Haystack Document")
    raise DocumentProblem(f"is a {type(item).__name__}: give a string, a dict with 'text', or a "
                          "LangChain, LlamaIndex or Haystack document", "documents")


def _node_fields(node: Any) -> tuple[Any, Any, Any, Any]:
    getter = getattr(node, "get_content", None)
    text = getter() if callable(getter) else getattr(node, "text", None)
    return text, node.node_id, getattr(node, "ref_doc_id", None), getattr(node, "metadata", None)


def to_document(item: Any, rank: int) -> RetrievedDocument:
    """``item`` (a string, dict or framework document; see the module) as the ``rank``-th
    retrieved document. Raises :class:`DocumentProblem` naming the document (its rank, and its
    id where it has one) and the field at fault."""
    if isinstance(item, str):
        text, doc_id, source, meta, score, kind = item, None, None, None, None, "string"
    else:
        try:
            text, doc_id, source, meta, score, kind = _fields(item)
        except DocumentProblem as exc:
            raise DocumentProblem(f"document {rank} {exc}", exc.field) from None
    name = f"document {rank}" + ("" if doc_id in (None, "") else f" (id {str(doc_id)!r})")
    if text is None:
        raise DocumentProblem(f"{name}, a {kind}, has no text", "text")
    if not isinstance(text, str):
        raise DocumentProblem(f"{name}: its text must be a string, got {type(text).__name__}",
                              "text")
    if not text.strip():
        raise DocumentProblem(f"{name}: its text is empty", "text")
    if meta is not None and not isinstance(meta, Mapping):
        raise DocumentProblem(f"{name}: metadata must be a dict, got {type(meta).__name__}",
                              "metadata")
    metadata = json_safe(dict(meta or {}))
    if source is None and isinstance(metadata.get("source"), str):
        source = metadata["source"]
    for key, value in (("id", doc_id), ("source", source)):
        if isinstance(value, bool) or (value is not None and not isinstance(value, (str, int))):
            raise DocumentProblem(f"{name}: {key} must be a string, got "
                                  f"{type(value).__name__}", key)
    return RetrievedDocument(text=text, rank=rank,
                             id=None if doc_id is None or doc_id == "" else str(doc_id),
                             source=None if source is None else str(source),
                             metadata=metadata, score=_score(score, name))


def _score(score: Any, name: str) -> float | None:
    """A retriever's score as a float (numpy scalars too); None for none or NaN."""
    if score is None:
        return None
    try:
        if isinstance(score, bool):
            raise TypeError
        value = float(score)
    except (TypeError, ValueError):
        raise DocumentProblem(f"{name}: score must be a number, got {type(score).__name__}",
                              "score") from None
    return None if math.isnan(value) else value


def is_document_list(value: Any) -> bool:
    """Whether a row's ``passages`` list holds documents (dicts or framework objects) rather
    than strings (a number or null among strings is a bad passage, not a document)."""
    plain = (str, int, float, bool, list, tuple, type(None))
    return isinstance(value, (list, tuple)) and any(not isinstance(v, plain) for v in value)


def describe(doc: RetrievedDocument) -> str:
    """``document 2 (id 'hr-7')``: the document as an error names it."""
    return f"document {doc.rank}" + (f" (id {doc.id!r})" if doc.id is not None else "")


#: Where :func:`duplicate_problem` keeps each id's NFC form in ``seen`` (under a prefix of NUL
#: characters, which no printable id starts with).
NFC_KEY = "\x00NFC\x00"


def duplicate_problem(docs: Sequence[RetrievedDocument], seen: dict[str, tuple[str, str]],
                      query: str = "") -> str | None:
    """The message for the first document whose id was seen (``seen``: id -> (text, the query
    it was retrieved for), updated) with another text; None when every id names one text."""
    for doc in docs:
        if doc.id is None:
            continue
        # ids that differ only in their Unicode normalisation (NFC, NFD) print the same
        spelled, said = seen.setdefault(NFC_KEY + unicodedata.normalize("NFC", doc.id),
                                        (doc.id, query))
        if spelled != doc.id:
            first = f" (retrieved for query {said!r})" if said and said != query else ""
            return (f"{describe(doc)} has an id that differs from the id {spelled!r} of another "
                    f"document{first} only in its Unicode normalisation (NFC or NFD): the two "
                    "print the same; spell them alike, or give them ids that differ")
        known, where = seen.setdefault(doc.id, (doc.text, query))
        if known != doc.text:
            first = f" (retrieved for query {where!r})" if where and where != query else ""
            return (f"{describe(doc)} has the id of another document{first} with a different "
                    "text: give each document its own id")
    return None


def passage_names(docs: Sequence[RetrievedDocument] | None, n: int) -> list[str]:
    """What each of ``n`` passages is called wherever ctxleak shows it: the document's id where
    the data gives one, else its number from 1."""
    if docs is None:
        return [str(j + 1) for j in range(n)]
    return [d.id if d.id is not None else str(j + 1) for j, d in enumerate(docs)]


def document_fields(docs: Sequence[RetrievedDocument] | None, n: int, top: int | None
                    ) -> dict[str, Any]:
    """The naming fields of a record's ``n`` passages: ``passage_ids`` (:func:`passage_names`)
    and ``max_passage_id`` (the name of passage ``top``, a 0-based index here; the record's
    ``max_passage`` numbers it from 1);
    with retrieved documents also each one's ``passage_sources``, ``passage_scores``,
    ``passage_ranks`` (from 1) and ``passage_metadata``."""
    names = passage_names(docs, n)
    out: dict[str, Any] = {"passage_ids": names,
                           "max_passage_id": None if top is None else names[top]}
    if docs is not None:
        out.update(passage_sources=[d.source for d in docs],
                   passage_scores=[d.score for d in docs],
                   passage_ranks=[d.rank for d in docs],
                   passage_metadata=[dict(d.metadata) for d in docs])
    return out


__all__ = ["DocumentProblem", "RetrievedDocument", "describe", "document_fields",
           "duplicate_problem", "is_document_list", "json_safe", "passage_names",
           "to_document"]
