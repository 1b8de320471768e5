"""Leak budgets per document class or per document, the CI gate's rule ("Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2 with S = one
document).

A document's class is the value of a metadata field (``classification`` unless the user names
another). A budget, in nats, bounds the document's **leak**: its leave-one-out influence above
the per-document control threshold (the decoys', :mod:`ctxleak.methods.influence.decoys`),
summed over the answers in which it was judged leaked. A copy (a verbatim span, a secret or a
PII value of the document in an answer) is a leak no ex-post number measures: it exceeds a
budget of 0 whatever the nats. A document's own budget (``document_budgets``) wins over its
class's; class ``public`` is reported, never over a budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.mitigations.ledger import PUBLIC  # the class that never fails the gate

#: The metadata field read for a document's class unless the user names another.
CLASS_FIELD = "classification"


def parse_budgets(value: Any, param: str) -> dict[str, float]:
    """``"restricted=0,internal=5"`` (or a mapping) as {name: nats}, each a number ≥ 0."""
    if value is None:
        return {}
    if isinstance(value, str):
        pairs: list[tuple[str, Any]] = []
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, eq, nats = part.rpartition("=")
            if not eq or not name.strip():
                raise ConfigError(f"{param}: '{part}' is not NAME=NATS (e.g. restricted=0,"
                                  f"internal=5)", param=param)
            pairs.append((name.strip(), nats.strip()))
    elif isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        raise ConfigError(f"{param} must be a dict or 'NAME=NATS,...', not "
                          f"{type(value).__name__}", param=param)
    out: dict[str, float] = {}
    for name, nats in pairs:
        try:
            number = float(nats)
        except (TypeError, ValueError):
            raise ConfigError(f"{param}: the budget of '{name}' must be a number of nats, not "
                              f"{nats!r}", param=param) from None
        if math.isnan(number) or number < 0:
            raise ConfigError(f"{param}: the budget of '{name}' must be ≥ 0 nats, not {nats}",
                              param=param)
        out[name] = number
    return out


@dataclass(frozen=True)
class Budgets:
    """The budgets of a run: per class (of ``class_field``) and per document name (nats)."""

    class_field: str = CLASS_FIELD
    classes: Mapping[str, float] = field(default_factory=dict)
    documents: Mapping[str, float] = field(default_factory=dict)

    def of(self, name: str, cls: str | None) -> float | None:
        """The budget of document ``name`` of class ``cls`` (None: none, or public)."""
        if cls == PUBLIC:
            return None
        if name in self.documents:
            return self.documents[name]
        return None if cls is None else self.classes.get(cls)

    @property
    def any(self) -> bool:
        return bool(self.classes or self.documents)


def document_class(metadata: Any, class_field: str) -> str | None:
    """A document's class: its metadata's ``class_field`` as a string (None without one)."""
    if not isinstance(metadata, Mapping):
        return None
    value = metadata.get(class_field)
    return None if value is None else str(value)


def check_class_budgets(budgets: Mapping[str, float] | None, class_field: str,
                        contexts: Iterable[Sequence[Any] | None]) -> None:
    """Refuse a class budget for a class no document of the run has (``contexts``: each
    example's retrieved documents, with ``metadata``), naming it and the classes seen."""
    if not budgets:
        return
    seen = {c for docs in contexts for d in docs or ()
            if (c := document_class(getattr(d, "metadata", None), class_field)) is not None}
    unknown = sorted(set(budgets) - seen)
    if unknown:
        raise ConfigError(f"class_budgets: no document has {class_field} "
                          f"'{unknown[0]}' (classes seen: {', '.join(sorted(seen)) or 'none'})",
                          param="class_budgets")


def over(row: Mapping[str, Any]) -> bool:
    """Whether a ledger row is over its budget: its leak (nats above the per-document control,
    summed) exceeds it, or it was copied and the budget is 0."""
    budget = row.get("budget")
    if budget is None:
        return False
    return float(row.get("leak_sum") or 0.0) > budget or (budget == 0 and bool(row["copied"]))


def breach_text(row: Mapping[str, Any]) -> str:
    """The gate's line for a row over its budget: which document, which answer, how much."""
    cls = f"{row['class']}, " if row.get("class") else ""
    parts = [f"leaked in {row['leaked']} answer(s), {float(row.get('leak_sum') or 0.0):.3g} "
             f"nats above its control in all"]
    worst = row.get("worst_answer") or {}
    if worst.get("id") is not None and worst.get("above") is not None:
        parts.append(f"most in {worst['id']}, by {worst['above']:.3g} nats")
    copy = row.get("first_copy") or {}
    if copy:
        parts.append(f"copied in {row['copied']} answer(s), first into {copy['id']} "
                     f"({copy['text']!r})")
    return f"{row['document']} ({cls}budget {row['budget']:g} nats): {'; '.join(parts)}"


def exposure_text(row: Mapping[str, Any], budget: float) -> str:
    """The gate's line for a row over the single exposure budget (summed influence)."""
    top = (row.get("top_queries") or [{}])[0]
    most = (f"; most in {top['id']} ({top['influence']:.3g} nats)" if top.get("id") is not None
            else "")
    return (f"{row['document']} (exposure budget {budget:g} nats): influence "
            f"{row['influence_sum']:.3g} nats summed over {row['scored']} answer(s){most}")


__all__ = ["CLASS_FIELD", "PUBLIC", "Budgets", "breach_text", "check_class_budgets",
           "document_class", "exposure_text", "over", "parse_budgets"]
