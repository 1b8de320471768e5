"""The membership verdict leads with the strongest evidence: where no ε bound is shown but an
attack tells members from non-members (its AUC interval above 0.5), the first sentence says so
in numbers (AUC with its interval and one-sided p-value, members found with no false positive),
and the next why no bound: how many documents a bound above 0 would need at the measured rates
(:func:`ctxleak.methods.attacks.lower_bound.documents_needed`).

A bound of 0 with a clear separation is a small sample, not a private system ("Auditing
Differentially Private Machine Learning: How Private is Private SGD?": a lower bound needs
enough trials at a low false-positive rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods.verdict import make_verdict


def members_at_zero_fp(attack: Mapping[str, Any]) -> int:
    """The most members an attack finds at a threshold that calls no non-member a member (its
    ROC points with ``fp`` 0)."""
    return max((int(p["tp"]) for p in attack.get("roc") or () if int(p["fp"]) == 0), default=0)


def separates(attack: Mapping[str, Any]) -> bool:
    """Whether an attack's AUC interval lies above 0.5."""
    ci = attack.get("auc_ci")
    low = ci.get("low") if isinstance(ci, Mapping) else None
    return low is not None and float(low) > 0.5


def separation_sentence(name: str, attack: Mapping[str, Any]) -> str:
    """``The mask attack separates members from non-members: AUC 0.75 [0.65, 0.85], p = 0.0002,
    10 of 20 members found with no false positive.``"""
    ci = attack["auc_ci"]
    p = (attack.get("auc_test") or {}).get("p_value")
    found = members_at_zero_fp(attack)
    parts = [f"AUC {attack['auc']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"]
    if p is not None:
        parts.append(f"p = {p:.2g}")
    if found:
        parts.append(f"{found} of {attack['n_members']} members found with no false positive")
    return f"The {name} attack separates members from non-members: {', '.join(parts)}."


def why_no_bound(attack: Mapping[str, Any]) -> str:
    """Why no ε bound came of a separating attack: the documents it had and how many a bound
    above 0 would need at its rates (half members)."""
    eps = attack.get("eps") or {}
    have = int(attack["n_members"]) + int(attack["n_non_members"])
    need = eps.get("documents_needed")
    conf = eps.get("confidence")
    at = f" at {100 * conf:.4g} % confidence" if conf is not None else ""
    if need is None:
        return (f"No ε lower bound{at}: with {have} documents its true and false positive "
                f"rates do not show one at any number of documents the audit scans.")
    return (f"No ε lower bound{at} yet: {have} documents are too few; at these rates a bound "
            f"above 0 needs about {need} (half members).")


def leading_verdict(summary: Mapping[str, Any]) -> str | None:
    """The verdict's text when the best bound is 0 and some attack separates members (the
    best-AUC one leads), else None (the power verdict stands)."""
    if summary.get("eps_lower") not in (0, 0.0):
        return None
    attacks = {k: v for k, v in (summary.get("attacks") or {}).items()
               if isinstance(v, Mapping) and "auc" in v and separates(v)}
    if not attacks:
        return None
    name = max(attacks, key=lambda k: float(attacks[k]["auc"]))
    return f"{separation_sentence(name, attacks[name])} {why_no_bound(attacks[name])}"


def lead_with_separation(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with its verdict led by :func:`leading_verdict` where that applies (then the
    most a perfect attack could show), its rule kept; as it was otherwise."""
    lead = leading_verdict(summary)
    if lead is None:
        return summary
    most = summary.get("eps_max_showable")
    if most:
        lead += f" With these documents a perfect attack could have shown ε ≥ {most:.2g} nats."
    return {**summary, "verdict": make_verdict(lead, summary["verdict"]["rule"])}


__all__ = ["lead_with_separation", "leading_verdict", "members_at_zero_fp", "separates",
           "separation_sentence", "why_no_bound"]
