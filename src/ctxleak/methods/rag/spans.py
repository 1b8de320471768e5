"""Production traces of a RAG pipeline as data rows ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.1 with S = one retrieved document, measured
on the answer the deployment gave).

OpenInference (OpenTelemetry) spans exported as JSONL, one span per line: each span has
``attributes`` holding ``input.value``, ``output.value`` and, on retriever spans,
``retrieval.documents.N.document.id|content|metadata|score``, flat (dotted keys) or nested.
Spans are grouped into turns by their trace id (``context.trace_id`` or ``trace_id``); each
trace becomes one row: ``query`` the root span's input (else the retriever's), ``documents``
its retriever spans' documents in order, ``response`` the root span's output (else the last
LLM span's), ``id`` the trace id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxleak.errors import InputError
from ctxleak.run.records import Row, check_input_file

#: The log formats a data file may be read as.
LOG_FORMATS = ("auto", "rows", "openinference")
SPAN_SHAPE = ("an OpenInference span: a JSON object with 'attributes' and a trace id "
              "('context.trace_id' or 'trace_id')")


def trace_id(span: Any) -> str | None:
    """The span's trace id (``context.trace_id`` or ``trace_id``); None if it has none."""
    if not isinstance(span, Mapping) or not isinstance(span.get("attributes"), Mapping):
        return None
    context = span.get("context")
    value = context.get("trace_id") if isinstance(context, Mapping) else None
    value = value if value is not None else span.get("trace_id")
    return None if value is None else str(value)


def is_span_log(path: Any) -> bool:
    """Whether ``path`` is a JSONL file whose first object is an OpenInference span. Only a
    regular file is opened: a pipe would block here (and is refused where rows are read)."""
    if not isinstance(path, (str, Path)) or Path(path).suffix.lower() not in (".jsonl",
                                                                              ".ndjson"):
        return False
    if not Path(path).is_file():
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    return trace_id(json.loads(line)) is not None
    except (OSError, ValueError):
        return False
    return False


def flat(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested attributes as OpenTelemetry's dotted keys (``retrieval.documents.0.document.id``);
    flat ones unchanged."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + "."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for j, item in enumerate(value):
                out.update(flat(item, f"{name}.{j}."))
        else:
            out[name] = value
    return out


def _text(value: Any, mime: Any) -> str | None:
    """An ``input.value``/``output.value`` as text: a JSON object's query or answer field."""
    if not isinstance(value, str):
        return None if value is None else json.dumps(value)
    if mime == "application/json" or value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, Mapping):
            for key in ("query", "question", "input", "output", "answer", "response", "text"):
                if isinstance(parsed.get(key), str):
                    return str(parsed[key])
    return value


def _documents(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``retrieval.documents.N.document.*`` of one span, in the order of N."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        parts = key.split(".")
        if len(parts) == 5 and parts[:2] == ["retrieval", "documents"] \
                and parts[2].isdigit() and parts[3] == "document":
            found.setdefault(int(parts[2]), {})[parts[4]] = value
    docs = []
    for n in sorted(found):
        doc = found[n]
        meta = doc.get("metadata")
        if isinstance(meta, str):
            try:
                meta = json.loads(meta)
            except ValueError:
                meta = {"metadata": meta}
        docs.append({"text": doc.get("content"), "id": doc.get("id"), "score": doc.get("score"),
                     "metadata": meta if isinstance(meta, Mapping) else None})
    return docs


def span_rows(path: str | Path) -> list[Row]:
    """One row per trace of an OpenInference span log (see the module), named by the file and
    the line of the trace's first span. A line that is not a span is an
    :class:`~ctxleak.errors.InputError` naming the file, the line and what was expected."""
    where = str(check_input_file(path))
    traces: dict[str, list[tuple[int, dict[str, Any], Mapping[str, Any]]]] = {}
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                span = json.loads(line)
            except ValueError as exc:
                raise InputError(f"not JSON ({exc.args[0]}); expected {SPAN_SHAPE}",
                                 file=where, line=line_no) from None
            tid = trace_id(span)
            if tid is None:
                raise InputError(f"unknown shape: expected {SPAN_SHAPE}", file=where,
                                 line=line_no)
            traces.setdefault(tid, []).append((line_no, flat(span["attributes"]), span))
    if not traces:
        raise InputError("no spans in the file", file=where)
    return [_trace_row(tid, spans, where) for tid, spans in traces.items()]


def _trace_row(tid: str, spans: list[tuple[int, dict[str, Any], Mapping[str, Any]]],
               where: str) -> Row:
    """The row of one trace (see the module)."""
    roots = [s for s in spans if not s[2].get("parent_id")]
    kind = "openinference.span.kind"
    retrievers = [s for s in spans if any(k.startswith("retrieval.documents.") for k in s[1])]
    llms = [s for s in spans if str(s[1].get(kind, "")).upper() == "LLM"]
    first = spans[0][0]

    def value(group: list[Any], name: str) -> str | None:
        for _, attrs, _ in group:
            text = _text(attrs.get(f"{name}.value"), attrs.get(f"{name}.mime_type"))
            if text is not None:
                return text
        return None

    query = value(roots, "input") or value(retrievers, "input")
    response = value(roots, "output") or value(list(reversed(llms)), "output")
    fields: dict[str, Any] = {"id": tid, "query": query,
                              "documents": [d for s in retrievers for d in _documents(s[1])]}
    if response is not None:
        fields["response"] = response
    if query is None:
        raise InputError(f"trace {tid!r} has no query: no root or retriever span with "
                         "'input.value'", file=where, line=first, field="input.value")
    return Row(fields=fields, file=where, line=first)


__all__ = ["LOG_FORMATS", "flat", "is_span_log", "span_rows", "trace_id"]
