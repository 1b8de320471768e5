"""The audit's verdict ("Evaluating Privacy Leakage From In-Context Learning", §5 and App. E.2;
the readings of :mod:`ctxleak.methods.verdict`): whether the privacy loss the generated text
actually incurred, ε_empirical, stays within the budget ε_target the mechanism was calibrated
to, at every setting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.verdict import listing, make_verdict, num

UNITS = {
    "target_eps": "ε of (ε, δ)-DP the mechanism was calibrated to (nats)",
    "eps_theoretical": "ε the accountant gives for the calibrated mechanism (nats)",
    "eps_empirical": "ε converted from the Rényi privacy loss the generated tokens actually "
                     "incurred (nats)",
    "ratio": "ε_empirical / ε_target (below 1: within the budget)",
    "eps_empirical_zero_loss": "ε_empirical of a zero loss: the floor of the conversion (nats)",
}


def _where(r: dict[str, Any]) -> str:
    return f"ε_target = {num(r['target_eps'])}, δ = {r['delta']:g}"


def audit_verdict(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Within budget at every setting, or which settings exceed it."""
    rule = ("A setting is within its budget when ε_empirical ≤ ε_target, i.e. ratio ≤ 1: "
            "ε_empirical is the ε (at the setting's δ and Rényi order α*) of the privacy loss "
            "the generated tokens actually incurred, a lower bound of the mechanism's; above 1 "
            "the mechanism leaked more than it was calibrated to (a bug, or a broken "
            "assumption).")
    measured = [r for r in rows if r.get("ratio") is not None and math.isfinite(r["ratio"])]
    if not measured:
        return make_verdict("No setting produced a sequence to audit.", rule)
    over = [r for r in measured if r["ratio"] > 1]
    incomplete = [r for r in rows if not r.get("complete", True)]
    tail = (f" ({len(incomplete)} setting(s) produced fewer sequences than asked)"
            if incomplete else "")
    if over:
        names = [f"{_where(r)} (ε_empirical {num(r['eps_empirical'])}, ratio "
                 f"{num(r['ratio'])})" for r in sorted(over, key=lambda r: -r["ratio"])]
        return make_verdict(f"The mechanism exceeds its budget at {len(over)} of "
                            f"{len(measured)} setting(s): {listing(names)}{tail}.", rule)
    top = max(measured, key=lambda r: r["ratio"])
    return make_verdict(
        f"Within budget at all {len(measured)} setting(s): the largest ε_empirical / ε_target "
        f"is {num(top['ratio'])} ({_where(top)}, ε_empirical {num(top['eps_empirical'])})"
        f"{tail}.", rule)


__all__ = ["UNITS", "audit_verdict"]
