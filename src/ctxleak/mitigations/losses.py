"""What one answer costs one document: the Rényi-DP events a mechanism's answer composes from,
a document's :class:`Loss` in an answer, and whether an ex-post loss is within a claim's ε
(:class:`~ctxleak.mitigations.mechanisms.Mechanism` charges and reports them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxleak.mitigations.accounting import ComposedEvent, PrivacyEvent

#: Rényi-DP events that compose to a loss: (event, how many runs of it).
Events = tuple[tuple[PrivacyEvent, int], ...]


def events_rdp(events: Events | None, order: float) -> float:
    """The Rényi divergence at ``order`` of ``events`` composed (adding up, Theorem C.7 of
    "Evaluating Privacy Leakage From In-Context Learning"); infinite where there are none (an
    (ε, δ) mechanism without a Rényi curve)."""
    if events is None:
        return math.inf
    import numpy as np

    orders = np.asarray([float(order)])
    return float(sum(float(ComposedEvent(e, n).rdp(orders)[0]) for e, n in events))


@dataclass(frozen=True)
class Loss:
    """What one answer can cost one document: ``eps`` (its ε under basic composition, δ being
    the claim's) and the Rényi-DP ``events`` it composes from (None: an (ε, δ) mechanism with
    no Rényi curve, such as a vote's limited-domain steps)."""

    eps: float
    events: Events | None = None

    def rdp(self, order: float) -> float:
        """:func:`events_rdp` of this loss."""
        return events_rdp(self.events, order)


#: Headroom on the claim for float noise when reading whether a loss is within it (nats).
WITHIN_TOLERANCE = 1e-9


def within_claim(loss: float, eps: float | None) -> bool:
    """``|loss| ≤ ε`` of a claim (None: no claim, never within). Beyond it is not by itself a
    broken claim: an (ε, δ) claim bounds the loss's tail through δ (and a Rényi-DP conversion
    more loosely than δ itself), so a rare loss above ε is allowed; many are not."""
    return eps is not None and abs(loss) <= float(eps) + WITHIN_TOLERANCE
