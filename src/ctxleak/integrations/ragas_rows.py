"""A ragas evaluation dataset as ctxleak's rows, and the figures a ragas metric reads from
their influence records (the parts of :mod:`ctxleak.integrations.ragas` that need no ragas).

Each single-turn sample (``user_input``, ``retrieved_contexts``, ``response``) becomes one row
of a query log: its question, its retrieved contexts as documents (numbered from 1) and its
logged response, scored as it was, never generated again. The figures are those of
:func:`ctxleak.influence` on those rows ("Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", Def. 3.1-3.2, each context left out against a control of
contexts the answer never saw), read from its records:

=========================== ======= ==========================================================
figure                      unit    what it is
=========================== ======= ==========================================================
``influence_above_control`` nats    the contexts' influence beyond the control's (NaN without
                                    a control: a dataset of one row, or rows sharing contexts)
``influence``               nats    the contexts' influence on the response
``copied_spans``            spans   runs of 20 characters or more copied from a context
``values_carried_out``      values  secrets and personal data of a context in the response
=========================== ======= ==========================================================
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxleak.errors import InputError

#: Each figure a metric can report, and its unit.
FIGURES: dict[str, str] = {"influence_above_control": "nats", "influence": "nats",
                           "copied_spans": "spans", "values_carried_out": "values"}


def _field(sample: Any, name: str) -> Any:
    return sample.get(name) if isinstance(sample, Mapping) else getattr(sample, name, None)


def ragas_rows(dataset: Any) -> list[dict[str, Any]]:
    """ctxleak's rows for a ragas ``EvaluationDataset`` (or a sequence of its
    ``SingleTurnSample`` objects, or of dicts with the same keys): ``id`` ``row-N`` (N from 1),
    ``query``, ``documents`` and ``response``; a sample lacking one of the three columns, or
    holding the wrong type, is refused, naming its row and field."""
    samples = getattr(dataset, "samples", dataset)
    rows = []
    for n, sample in enumerate(samples, 1):

        def bad(message: str, field: str, n: int = n) -> InputError:
            return InputError(message, file="ragas dataset", line=n, field=field)

        query, contexts, response = (_field(sample, k) for k in
                                     ("user_input", "retrieved_contexts", "response"))
        if not isinstance(query, str) or not query.strip():
            raise bad("needs the question as text", "user_input")
        if not isinstance(contexts, Sequence) or isinstance(contexts, str) or not contexts \
                or not all(isinstance(c, str) for c in contexts):
            raise bad("needs a non-empty list of texts", "retrieved_contexts")
        if not isinstance(response, str):
            raise bad("needs the logged response as text", "response")
        rows.append({"id": f"row-{n}", "query": query, "documents": list(contexts),
                     "response": response})
    if not rows:
        raise InputError("the dataset has no samples", file="ragas dataset")
    return rows


def row_key(sample: Any) -> tuple[str, tuple[str, ...], str]:
    """What names a ragas sample: its question, contexts and response."""
    return (str(_field(sample, "user_input")), tuple(_field(sample, "retrieved_contexts") or ()),
            str(_field(sample, "response")))


def figure(record: Mapping[str, Any], name: str) -> float:
    """One of :data:`FIGURES` from an influence record (NaN for the influence above the
    control where the run had none)."""
    copied = record.get("copied") or []
    if name == "influence":
        return float(record["influence"])
    if name == "influence_above_control":
        above = record.get("influence_above_control")
        return math.nan if above is None else float(above)
    if name == "copied_spans":
        return float(sum(c.get("kind") == "verbatim" for c in copied))
    if name == "values_carried_out":
        return float(sum(c.get("kind") in ("secret", "pii") for c in copied))
    raise InputError(f"unknown figure {name!r} (one of {', '.join(FIGURES)})", field="figure")


class Measured:
    """A dataset's rows measured together, once, on first use: ``influence(model, rows,
    progress=False, **options)`` (pass :func:`ctxleak.influence`), so that each row's control
    is made of the other rows' contexts, as ``ctxleak influence`` makes it."""

    def __init__(self, dataset: Any, influence: Callable[..., Any], model: Any = "default",
                 **options: Any) -> None:
        self.rows = ragas_rows(dataset)
        self.influence, self.model, self.options = influence, model, options
        self._by_key = {(r["query"], tuple(r["documents"]), r["response"]): r["id"]
                        for r in self.rows}
        self._records: dict[str, Mapping[str, Any]] | None = None
        self._lock = threading.Lock()

    @property
    def records(self) -> dict[str, Mapping[str, Any]]:
        """The influence record of each row, by row id (measured on first use)."""
        with self._lock:
            if self._records is None:
                result = self.influence(self.model, self.rows, progress=False, **self.options)
                self._records = {str(r["id"]): r for r in result.records}
        return self._records

    def record(self, sample: Any) -> Mapping[str, Any]:
        """The record of ``sample``; one that is not a row of the measured dataset is refused."""
        row = self._by_key.get(row_key(sample))
        if row is None:
            raise InputError(f"sample {row_key(sample)[0]!r} is not a row of the dataset this "
                             f"metric measured", file="ragas dataset", field="user_input")
        return self.records[row]
