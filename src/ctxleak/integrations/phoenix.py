"""ctxleak's context influence as Arize Phoenix evaluations: each answered trace of an
OpenInference span log, measured by :func:`ctxleak.influence` on its logged answer (Def. 3.1 of
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", each
retrieved document left out in turn, against a control of documents the answer never saw),
written back onto the trace's LLM span as a span annotation, the form Phoenix's own evaluations
take (a data frame indexed by span id with ``label``, ``score`` and ``explanation``).

A PII detector run on the response (what RAG evaluation frameworks offer) cannot say whether a
value came from the context or from the model; the annotation says how much the retrieved
documents moved the answer beyond what unrelated documents do, in nats.

The rule for the label, fixed before any data (in order): ``copied`` when the answer copied
from a retrieved document (20 characters or more verbatim, or a secret or PII value);
``above control`` when its influence is above the control's; ``within control`` when it is
not; ``no control`` when the run had none to compare with. The score is the influence above
the control (nats; None without a control). No document text is written: the explanation
names the most influential document by id and counts the copied spans.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxleak.errors import InputError
from ctxleak.methods.rag.spans import flat, trace_id

#: The annotation's name in Phoenix.
ANNOTATION = "ctxleak context leak"


def annotated_spans(path: str | Path) -> dict[str, str]:
    """Each trace's span to annotate: its LLM span (the answer), else its root span, by trace
    id, from an OpenInference span log (one JSON span per line)."""
    chosen: dict[str, tuple[int, str]] = {}
    where = Path(path)
    with where.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                span = json.loads(line)
            except ValueError as exc:
                raise InputError(f"not a JSON span ({exc})", file=str(where), line=number) from None
            tid = trace_id(span) if isinstance(span, Mapping) else None
            context = span.get("context") if isinstance(span, Mapping) else None
            span_id = (context.get("span_id") if isinstance(context, Mapping) else None) \
                or (span.get("span_id") if isinstance(span, Mapping) else None)
            if tid is None or not isinstance(span_id, str) or not span_id:
                continue
            kind = str(flat(span.get("attributes") or {}).get("openinference.span.kind", ""))
            rank = 0 if kind.upper() == "LLM" else 1 if span.get("parent_id") is None else 2
            if tid not in chosen or rank < chosen[tid][0]:
                chosen[tid] = (rank, span_id)
    return {tid: span_id for tid, (rank, span_id) in chosen.items() if rank < 2}


def _above(record: Mapping[str, Any]) -> float | None:
    """The influence above the control, nats; None without a control (or a figure that is not
    finite, as a run without one records it)."""
    above = record.get("influence_above_control")
    return None if above is None or not math.isfinite(float(above)) else float(above)


def _label(record: Mapping[str, Any]) -> str:
    above = _above(record)
    if record.get("copied"):
        return "copied"
    if above is None:
        return "no control"
    return "above control" if float(above) > 0 else "within control"


def _explanation(record: Mapping[str, Any]) -> str:
    parts = [f"influence of the retrieved documents {float(record['influence']):.4g} nats "
             f"({float(record.get('influence_per_token') or 0.0):.3g} nats per token)"]
    above = _above(record)
    parts.append("no control to compare with" if above is None
                 else f"{float(above):+.4g} nats above its control")
    if record.get("max_passage_id") is not None:
        parts.append(f"most influential document {record['max_passage_id']} "
                     f"({float(record.get('max_passage_influence') or 0.0):.4g} nats left out)")
    copied = record.get("copied") or []
    if copied:
        parts.append(f"{len(copied)} span(s) copied from a document")
    return "; ".join(parts)


def phoenix_annotations(records: Sequence[Mapping[str, Any]], spans: str | Path) -> Any:
    """The run's records (:func:`ctxleak.influence` over the span log ``spans``) as Phoenix span
    annotations: a pandas data frame indexed by ``span_id`` with ``label``, ``score`` (nats
    above the control, None without one), ``explanation`` and ``metadata`` (the figures, in
    nats, and the trace id), one row per measured trace; a record whose trace has no span to
    annotate is refused, naming it."""
    import pandas as pd

    by_trace = annotated_spans(spans)
    rows = []
    for record in records:
        tid = str(record["id"])
        if tid not in by_trace:
            raise InputError(f"trace {tid!r} has no LLM or root span to annotate",
                             file=str(spans), field="span_id")
        above = _above(record)
        rows.append({"span_id": by_trace[tid], "label": _label(record), "score": above,
                     "explanation": _explanation(record),
                     "metadata": {"trace_id": tid, "unit": "nats",
                                  "influence": float(record["influence"]),
                                  "influence_above_control": above,
                                  "max_passage_id": record.get("max_passage_id"),
                                  "copied_spans": len(record.get("copied") or [])}})
    frame = pd.DataFrame(rows).set_index("span_id")
    # None stays None (a float column would make it NaN, which JSON cannot carry)
    frame["score"] = pd.Series([r["score"] for r in rows], index=frame.index, dtype=object)
    return frame


def log_to_phoenix(records: Sequence[Mapping[str, Any]], spans: str | Path, *,
                   client: Any = None, base_url: str | None = None,
                   annotation_name: str = ANNOTATION) -> Any:
    """Write :func:`phoenix_annotations` to a Phoenix server as span annotations (annotator
    ``CODE``), through Phoenix's own client (``arize-phoenix-client``): ``client`` one already
    made, else one for ``base_url`` (else Phoenix's environment variables). Returns what the
    server inserted."""
    if client is None:
        try:
            from phoenix.client import Client
        except ImportError:
            raise InputError("logging to Phoenix needs its client: pip install "
                             "'ctxleak[phoenix]'", field="client") from None
        client = Client(base_url=base_url)
    return client.spans.log_span_annotations_dataframe(
        dataframe=phoenix_annotations(records, spans), annotation_name=annotation_name,
        annotator_kind="CODE", sync=True)
