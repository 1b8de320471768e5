"""How the privacy proxy's ledger composes a document's answers into what it has spent, as a
privacy filter: a document whose next answer would pass its budget is left out before that
answer, so each document's guarantee holds whatever the order and the choice of its answers.

* ``basic``: ε adds up (basic composition as a filter: "Privacy Odometers and Filters:
  Pay-as-you-Go Composition", Rogers, Roth, Ullman and Vadhan); what the ledger holds is ε.
* ``renyi``: the Rényi divergence at one order α, fixed when the proxy starts, adds up, and a
  document's budget ε at δ (``budget_delta``) is the divergence Theorem C.8 of "Evaluating
  Privacy Leakage From In-Context Learning" converts to exactly (ε, δ) ("Individual Privacy
  Accounting via a Rényi Filter", Feldman and Zrnic: a filter at a fixed order keeps the
  document (α, budget)-RDP, so (ε, δ)-DP). Answers made of many small steps (DP-RAG's tokens,
  bounded CID's) compose far below the sum of their ε; a mechanism with (ε, δ) steps and no
  Rényi curve (the votes) cannot be charged this way.

What the ledger holds is in the composition's unit (:meth:`Composition.unit`); a ledger keeps
one unit for its whole life.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxleak.errors import ConfigError
from ctxleak.mitigations.accounting import DEFAULT_ORDERS, rdp_budget, rdp_to_approx_dp
from ctxleak.mitigations.losses import Events, events_rdp
from ctxleak.proxy.budgets import Budgets

#: The compositions a proxy may keep its ledger in.
COMPOSITIONS = ("basic", "renyi")


@dataclass(frozen=True)
class Composition:
    """``kind`` (:data:`COMPOSITIONS`), the Rényi ``order`` α (``renyi`` only) and the δ of
    every document's budget."""

    kind: str = "basic"
    order: float | None = None
    delta: float = 1e-6

    def __post_init__(self) -> None:
        if self.kind not in COMPOSITIONS:
            raise ConfigError(f"accounting must be one of {', '.join(COMPOSITIONS)}, not "
                              f"{self.kind!r}", param="accounting")
        if not 0 < self.delta < 1:
            raise ConfigError(f"budget_delta must be in (0, 1), not {self.delta}",
                              param="budget_delta")
        if self.kind == "renyi" and not (self.order is not None and 1 < self.order < 1e6):
            raise ConfigError(f"renyi_order must be a number > 1, not {self.order}",
                              param="renyi_order")

    @property
    def renyi(self) -> bool:
        return self.kind == "renyi"

    def unit(self) -> str:
        """What the ledger's figures are: ``epsilon``, or ``renyi(order=…,delta=…)``."""
        return "epsilon" if not self.renyi else f"renyi(order={self.order:g},delta={self.delta:g})"

    def amount(self, eps: float, events: Events | None) -> float:
        """What a loss of ``eps`` (basic) or ``events`` (Rényi) holds in the ledger; a loss
        with no Rényi curve is infinite in Rényi units (it can never be charged)."""
        if not self.renyi:
            return float(eps)
        assert self.order is not None
        return events_rdp(events, self.order)

    def budgets(self, budgets: Budgets) -> Budgets:
        """``budgets`` (ε per document) in the ledger's unit."""
        if not self.renyi:
            return budgets

        def of(eps: float | None) -> float | None:
            assert self.order is not None
            return None if eps is None else rdp_budget(eps, self.delta, self.order)

        return Budgets(default=of(budgets.default),
                       overrides={d: of(b) or 0.0 for d, b in budgets.overrides.items()},
                       classes={c: of(b) or 0.0 for c, b in budgets.classes.items()})

    def epsilon(self, amount: float) -> float:
        """A ledger figure as the ε it guarantees at this composition's δ (basic: itself)."""
        if not self.renyi:
            return float(amount)
        assert self.order is not None
        return rdp_to_approx_dp([self.order], [amount], self.delta)[0]


def best_order(events: Events | None, budget: float, delta: float) -> float:
    """The order at which ``budget`` ε at ``delta`` holds the most answers whose loss is
    ``events`` (ties: the smaller order), chosen from public settings before any answer; 32
    where there are no events to choose by."""
    if events is None or not budget > 0:
        return 32.0
    best, order = -1.0, 32.0
    for alpha in DEFAULT_ORDERS:
        per = events_rdp(events, alpha)
        answers = math.inf if per == 0 else rdp_budget(budget, delta, alpha) / per
        if answers > best:
            best, order = answers, float(alpha)
    return order


__all__ = ["COMPOSITIONS", "Composition", "best_order"]
