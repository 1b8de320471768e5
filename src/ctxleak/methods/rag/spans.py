"""Production traces of a RAG pipeline as data rows ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.1 with S = one retrieved document, measured
on the answer the deployment gave).

OpenInference (OpenTelemetry) spans exported as JSONL, one span per line: each span has
``attributes`` holding ``input.value``, ``output.value`` and, on retriever spans,
``retrieval.documents.N.document.id|content|metadata|score``, flat (dotted keys) or nested.
Spans are grouped into turns by their trace id (``context.trace_id`` or ``trace_id``). Only a
trace with an LLM span (``openinference.span.kind`` LLM) is an answer; the others (an app
calling its retriever to show sources) are counted and never scored (:class:`SpanLog`). Each
answer becomes one row: ``query`` the root span's input (else the retriever's), ``documents``
its retriever spans' documents in order (``document.id`` their names), ``response`` the LLM
span's ``llm.output_messages.0.message.content`` (else the root span's output, else the LLM
span's), ``id`` the trace id; ``input_messages`` the LLM span's
``llm.input_messages.N.message.role|content`` (the prompt the app sent) and
``logged_temperature`` the temperature of its ``llm.invocation_parameters``, where it has them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxleak.errors import InputError
from ctxleak.run.records import Row, check_input_file, read_jsonl

#: The log formats a data file may be read as.
LOG_FORMATS = ("auto", "rows", "openinference")
SPAN_SHAPE = ("an OpenInference span: a JSON object with 'attributes' and a trace id "
              "('context.trace_id' or 'trace_id')")


def trace_id(span: Any) -> str | None:
    """The span's trace id (``context.trace_id`` or ``trace_id``); None if it has none."""
    raw = _raw_trace_id(span)
    return None if raw is None else str(raw)


def _raw_trace_id(span: Any) -> Any:
    if not isinstance(span, Mapping) or not isinstance(span.get("attributes"), Mapping):
        return None
    context = span.get("context")
    value = context.get("trace_id") if isinstance(context, Mapping) else None
    return value if value is not None else span.get("trace_id")


def is_span_log(path: Any) -> bool:
    """Whether ``path`` is a JSONL file whose first object is an OpenInference span. Only a
    regular file is opened: a pipe would block here (and is refused where rows are read). The
    first line is read as rows are (:func:`~ctxleak.run.records.read_jsonl`): one that is not
    UTF-8, too long, nested too deeply or with a key twice is the same error naming the file
    and line whatever the file turns out to be."""
    if not isinstance(path, (str, Path)) or Path(path).suffix.lower() not in (".jsonl",
                                                                              ".ndjson"):
        return False
    if not Path(path).is_file():
        return False
    for _, first in read_jsonl(path):
        return trace_id(first) is not None
    return False


#: The deepest nesting of a span's attributes that is read (OpenInference nests a few levels).
MAX_ATTRIBUTE_DEPTH = 32


class _TooDeep(ValueError):
    pass


def flat(attributes: Mapping[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested attributes as OpenTelemetry's dotted keys (``retrieval.documents.0.document.id``);
    flat ones unchanged. Nesting deeper than :data:`MAX_ATTRIBUTE_DEPTH` is refused
    (``ValueError``)."""
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise _TooDeep(f"attributes nested more than {MAX_ATTRIBUTE_DEPTH} levels deep")
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + ".", depth + 1))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for j, item in enumerate(value):
                out.update(flat(item, f"{name}.{j}.", depth + 1))
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


def _documents(attrs: Mapping[str, Any], where: str, line: int) -> list[dict[str, Any]]:
    """The ``retrieval.documents.N.document.*`` of one span, in the order of N; an id that is
    not a string or an integer is refused, naming the span's file and line."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        parts = key.split(".")
        if len(parts) == 5 and parts[:2] == ["retrieval", "documents"] \
                and parts[2].isdigit() and parts[3] == "document":
            found.setdefault(int(parts[2]), {})[parts[4]] = value
        elif len(parts) > 5 and parts[:2] == ["retrieval", "documents"] \
                and parts[3:5] == ["document", "id"]:  # an object, flattened
            raise InputError("the document id is a JSON object: a document id is a string or "
                             "an integer", file=where, line=line,
                             field=".".join(parts[:5]))
    docs = []
    for n in sorted(found):
        doc = found[n]
        ident = doc.get("id")
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
            raise InputError(f"the document id {json.dumps(ident)[:80]} is a JSON "
                             f"{type(ident).__name__}: a document id is a string or an integer",
                             file=where, line=line, field=f"retrieval.documents.{n}.document.id")
        meta = doc.get("metadata")
        if isinstance(meta, str):
            try:
                meta = json.loads(meta)
            except ValueError:
                meta = {"metadata": meta}
        docs.append({"text": doc.get("content"), "id": doc.get("id"), "score": doc.get("score"),
                     "metadata": meta if isinstance(meta, Mapping) else None})
    return docs


#: The span kind attribute, and the kind of a span that called the model.
KIND = "openinference.span.kind"
#: Where an LLM span keeps the messages it sent.
INPUT_MESSAGES = "llm.input_messages"


@dataclass(frozen=True)
class SpanLog:
    """A span log read: one row per answer (a trace with an LLM span), and how many traces
    were answers and how many had no LLM span (the retriever called alone: never scored)."""

    rows: list[Row]
    answers: int
    retriever_only: int

    @property
    def traces(self) -> dict[str, int]:
        """The counts as the summary's ``traces`` entry."""
        return {"answers": self.answers, "retriever_only": self.retriever_only}


def span_rows(path: str | Path) -> list[Row]:
    """The rows of :func:`read_span_log` (one per answer)."""
    return read_span_log(path).rows


def read_span_log(path: str | Path) -> SpanLog:
    """One row per answer of an OpenInference span log (see the module), named by the file and
    the line of the trace's first span; the traces without an LLM span counted. A line that is
    not a span, or a log with no LLM span at all, is an :class:`~ctxleak.errors.InputError`
    naming the file (and the line and what was expected)."""
    where = str(check_input_file(path))
    traces: dict[str, list[tuple[int, dict[str, Any], Mapping[str, Any]]]] = {}
    kinds: dict[str, tuple[str, int]] = {}
    for line_no, span in read_jsonl(where):
        raw = _raw_trace_id(span)
        if raw is None:
            raise InputError(f"unknown shape: expected {SPAN_SHAPE}", file=where,
                             line=line_no)
        if isinstance(raw, bool) or not isinstance(raw, (str, int)):
            raise InputError(f"the trace id {json.dumps(raw)[:80]} is a JSON "
                             f"{type(raw).__name__}: a trace id is a string or an integer",
                             file=where, line=line_no, field="trace_id")
        tid, kind = str(raw), type(raw).__name__
        if kinds.setdefault(tid, (kind, line_no))[0] != kind:
            raise InputError(f"the trace id {tid} is a {kind} here and a {kinds[tid][0]} at "
                             f"line {kinds[tid][1]}: two traces that print the same; write "
                             "one of them otherwise", file=where, line=line_no,
                             field="trace_id")
        try:
            attrs = flat(span["attributes"])
        except _TooDeep as exc:
            raise InputError(str(exc), file=where, line=line_no, field="attributes") from None
        traces.setdefault(tid, []).append((line_no, attrs, span))
    if not traces:
        raise InputError("no spans in the file", file=where)
    answers = {tid: spans for tid, spans in traces.items()
               if any(str(s[1].get(KIND, "")).upper() == "LLM" for s in spans)}
    alone = len(traces) - len(answers)
    if not answers:
        raise InputError(f"{alone} retriever-only trace{'s' if alone != 1 else ''} and no "
                         f"answer: no trace has an LLM span ({KIND} LLM), so there is no "
                         "logged answer to score", file=where, field=KIND)
    return SpanLog([_trace_row(tid, spans, where) for tid, spans in answers.items()],
                   len(answers), alone)


def _trace_row(tid: str, spans: list[tuple[int, dict[str, Any], Mapping[str, Any]]],
               where: str) -> Row:
    """The row of one trace (see the module)."""
    roots = [s for s in spans if not s[2].get("parent_id")]
    retrievers = [s for s in spans if any(k.startswith("retrieval.documents.") for k in s[1])]
    llms = [s for s in spans if str(s[1].get(KIND, "")).upper() == "LLM"]
    first = spans[0][0]

    def value(group: list[Any], name: str) -> str | None:
        for _, attrs, _ in group:
            text = _text(attrs.get(f"{name}.value"), attrs.get(f"{name}.mime_type"))
            if text is not None:
                return text
        return None

    query = value(roots, "input") or value(retrievers, "input")
    llm = llms[-1][1]
    said = llm.get("llm.output_messages.0.message.content")
    response = said if isinstance(said, str) else \
        value(roots, "output") or value(list(reversed(llms)), "output")
    fields: dict[str, Any] = {"id": tid, "query": query,
                              "documents": [d for s in retrievers for d in _documents(s[1], where, s[0])]}
    if response is not None:
        fields["response"] = response
    fields.update(_llm_input(llm))
    if query is None:
        raise InputError(f"trace {tid!r} has no query: no root or retriever span with "
                         "'input.value'", file=where, line=first, field="input.value")
    return Row(fields=fields, file=where, line=first)


def _llm_input(llm: Mapping[str, Any]) -> dict[str, Any]:
    """What an LLM span says of its call: ``input_messages`` (``llm.input_messages.N.message.
    role|content``, in the order of N; none without them) and ``logged_temperature`` (from
    ``llm.invocation_parameters``, a JSON string or an object)."""
    found: dict[int, dict[str, Any]] = {}
    for key, item in llm.items():
        parts = key.split(".")
        if len(parts) == 5 and key.startswith(INPUT_MESSAGES + ".") and parts[2].isdigit() \
                and parts[3] == "message" and parts[4] in ("role", "content"):
            found.setdefault(int(parts[2]), {})[parts[4]] = item
    out: dict[str, Any] = {}
    if found:
        out["input_messages"] = [found[n] for n in sorted(found)]
    params = llm.get("llm.invocation_parameters")
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except ValueError:
            params = None
    if not isinstance(params, Mapping):  # the flat form: llm.invocation_parameters.temperature
        params = {"temperature": llm.get("llm.invocation_parameters.temperature")}
    temperature = params.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        out["logged_temperature"] = float(temperature)
    return out


__all__ = ["INPUT_MESSAGES", "KIND", "LOG_FORMATS", "SpanLog", "flat", "is_span_log",
           "read_span_log", "span_rows", "trace_id"]
