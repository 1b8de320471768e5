"""The privacy proxy's budgets: ε per document (by id, by class, a default) and the arithmetic of
how many answers a budget allows (bounded Context Influence Decoding: Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models, App. B, Thm B.1, basic
composition). This module imports neither torch nor the rest of the proxy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ctxleak.errors import ConfigError
from ctxleak.mitigations.ledger import PUBLIC

#: Slack for float sums: a reservation that passes a budget by less than this is granted.
TOLERANCE = 1e-9
#: The most answers :func:`answers_allowed` reports (2**53, the last integer a float counts
#: exactly): a vanishing ε (5e-324) would otherwise make the count infinite.
MOST_ANSWERS = 2 ** 53


def answers_allowed(budget: float, eps: float, max_tokens: int) -> int:
    """How many answers of up to ``max_tokens`` tokens a budget of ``budget`` allows at ``eps``
    per token, each reserving ε·(max_tokens + 1) (the stopping EOS included; basic
    composition, Thm B.1): ⌊budget / (ε·(max_tokens + 1))⌋, within :data:`TOLERANCE`, at most
    :data:`MOST_ANSWERS`."""
    if not (math.isfinite(eps) and eps > 0) or max_tokens < 0:
        raise ConfigError(f"answers_allowed needs ε > 0 and max_tokens >= 0, not {eps} and "
                          f"{max_tokens}", param="eps")
    count = (budget + TOLERANCE) / (eps * (max_tokens + 1))
    return MOST_ANSWERS if not count < MOST_ANSWERS else max(0, math.floor(count))


@dataclass(frozen=True)
class Budgets:
    """The operator's budget per document: ``default`` ε for every document (None: no limit),
    ``classes`` by document class (:data:`PUBLIC` documents are never charged) and
    ``overrides`` by document id, which win over the class's (and make a document private)."""

    default: float | None = None
    overrides: Mapping[str, float] = field(default_factory=dict)
    classes: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in [("budget", self.default), *self.overrides.items(),
                            *self.classes.items()]:
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigError(f"the budget of {name!r} must be a finite number >= 0, "
                                  f"not {value}", param="budget")
        if PUBLIC in self.classes:
            raise ConfigError(f"class {PUBLIC!r} has no budget: its documents are never "
                              "charged", param="class_budget")

    def of(self, doc_id: str, doc_class: str | None = None) -> float | None:
        """The budget of ``doc_id`` of class ``doc_class``: its own, its class's, the default."""
        if doc_id in self.overrides:
            return self.overrides[doc_id]
        if doc_class is not None and doc_class in self.classes:
            return self.classes[doc_class]
        return self.default

    def public(self, doc_id: str, doc_class: str | None) -> bool:
        """Whether the document is public (never charged): class ``public``, no budget of its
        own."""
        return doc_class == PUBLIC and doc_id not in self.overrides


def share_hold(amount: float, budget: float | None, share: float, caller_spent: float,
               hold_rest: bool = False) -> float | None:
    """What one caller may hold of a document for a reservation of ``amount`` (in the unit of
    the ledger's ``spent``), when it may spend at most ``share`` × ``budget`` of it and holds
    ``caller_spent`` already; None: its share is spent. A reservation of 0 (ex-post charging)
    needs some share left; ``hold_rest`` (an unbounded spend) holds at most what is left of the
    share. No budget: no share limit."""
    if budget is None:
        return amount
    cap = share * budget
    if hold_rest:
        return min(amount, cap - caller_spent) if caller_spent < cap else None
    if amount > 0:
        return amount if caller_spent + amount <= cap + TOLERANCE else None
    return amount if caller_spent < cap else None
