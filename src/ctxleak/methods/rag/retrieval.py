"""A RAG pipeline's retriever as the way in to context influence ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", Def. 3.1 with the subset S = one retrieved
document).

:func:`retrieve` asks a retriever for each query's documents and returns data rows (``query``,
``documents`` and the query row's other fields) that :func:`ctxleak.influence` measures: each
document one passage, left out in turn. The retriever is recognised by what it has, never by
importing a framework:

* LangChain (a ``BaseRetriever``, a vector store's ``as_retriever()``): ``.invoke(query)`` ->
  ``Document`` list;
* LlamaIndex (``index.as_retriever()``): ``.retrieve(query)`` -> ``NodeWithScore`` list (the
  chunk's ``node_id`` is the document's ``id``, its source document ``ref_doc_id`` its
  ``source``);
* Haystack (a retriever component): ``.run(query=query)["documents"]``;
* any function ``query -> list`` of strings or dicts (``text``, ``id``, ``source``,
  ``metadata``, ``score``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.rag.documents import DocumentProblem, to_document
from ctxleak.run.records import read_rows

#: The most documents read from a retriever for one query: its answer is read whole (a generator
#: that never ends would be read until memory runs out), and a context of more documents than
#: this is beyond any model's window.
MAX_DOCUMENTS = 10_000


def retriever_call(retriever: Any) -> tuple[Callable[[str], Any], str]:
    """(a function query -> the retriever's items, what the retriever is): LangChain's
    ``invoke``, LlamaIndex's ``retrieve``, a Haystack component's ``run``, or the callable
    itself. Anything else is a :class:`ConfigError`."""
    if callable(getattr(retriever, "invoke", None)):
        return retriever.invoke, "LangChain retriever"
    if callable(getattr(retriever, "retrieve", None)):
        return retriever.retrieve, "LlamaIndex retriever"
    run = getattr(retriever, "run", None)
    if callable(run):
        def haystack(query: str) -> Any:
            out = run(query=query)
            if not isinstance(out, Mapping) or "documents" not in out:
                raise TypeError("its run(query=...) returned no 'documents'")
            return out["documents"]
        return haystack, "Haystack component"
    if callable(retriever):
        return retriever, "function"
    raise ConfigError(f"retriever must be a LangChain retriever (.invoke), a LlamaIndex "
                      f"retriever (.retrieve), a Haystack component (.run) or a function "
                      f"query -> documents, not {type(retriever).__name__}", param="retriever")


def query_rows(queries: Any) -> list[tuple[str, int, dict[str, Any]]]:
    """(file, line or position from 1, row) of each query: a list of strings, rows with ``query``
    (and optional ``id``, ``reference``...), or a JSONL/CSV file of such rows."""
    if isinstance(queries, (list, tuple)):
        queries = [{"query": q} if isinstance(q, str) else q for q in queries]
    rows = read_rows(queries, required=("query",))
    out = []
    for row in rows:
        query = row.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InputError("must be a non-empty string (the query the retriever is asked)",
                             file=row.file, line=row.line, field="query")
        out.append((row.file, row.line, dict(row.fields)))
    return out


def retrieve(retriever: Any, queries: Any) -> list[dict[str, Any]]:
    """Each query's retrieved documents, as data rows for :func:`ctxleak.influence`.

    ``retriever``: a LangChain retriever, a LlamaIndex retriever, a Haystack retriever
    component or a function ``query -> list`` of strings or dicts (see the module).
    ``queries``: a list of strings, rows (dicts) with ``query`` and optional ``id``,
    ``reference``, ``response``, ``response_ids``, or a JSONL/CSV file of them.

    Returns one row per query: its own fields (``id``, where it has none, its number from 1),
    with ``documents`` the retriever's list in its order (rank 1 first), each a dict with
    ``text``, ``id``, ``source``, ``metadata``, ``rank`` and ``score``. A retriever that
    raises or exits (``sys.exit``), returns nothing, more than :data:`MAX_DOCUMENTS` documents
    or something that is not a document is an :class:`~ctxleak.errors.InputError` naming the
    query.
    """
    call, kind = retriever_call(retriever)
    out = []
    for file, line, row in query_rows(queries):
        query = row["query"]
        where = f"query {query!r}: "

        try:
            items = call(query)
            if items is None:
                items = []
            elif isinstance(items, (str, Mapping)) or not hasattr(items, "__iter__"):
                items = [items]  # one document (or something to_document refuses)
            items = list(islice(items, MAX_DOCUMENTS + 1))
        # any failure of the user's retriever, an exit too (a CI gate must not pass on it)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            what = f"exited (sys.exit({exc.code!r}))" if isinstance(exc, SystemExit) else \
                f"raised {type(exc).__name__}: {exc}"
            raise InputError(f"{where}the {kind} {what}", file=file, line=line,
                             field="query") from exc
        if not items:
            raise InputError(f"{where}the retriever returned nothing: no document to measure",
                             file=file, line=line, field="query")
        if len(items) > MAX_DOCUMENTS:
            raise InputError(f"{where}the {kind} returned more than {MAX_DOCUMENTS:,} documents "
                             "(a generator that never ends?): ctxleak reads at most "
                             f"{MAX_DOCUMENTS:,} per query", file=file, line=line,
                             field="query")
        try:
            docs = [to_document(item, rank).to_dict() for rank, item in enumerate(items, 1)]
        except DocumentProblem as exc:
            raise InputError(f"{where}the {kind} returned {exc}", file=file, line=line,
                             field="documents" if exc.field == "documents"
                             else f"documents.{exc.field}") from None
        out.append({"id": str(line), **row, "documents": docs})  # unnamed: numbered from 1
    return out


__all__ = ["MAX_DOCUMENTS", "query_rows", "retrieve", "retriever_call"]
