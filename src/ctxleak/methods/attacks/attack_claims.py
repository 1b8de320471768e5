"""What a target's answers say they were released under (a ``ctxleak serve`` answer's claim),
and the ε per document an attack's queries add up to from it: read by the attacks' summaries
(:mod:`.attack_method`) and by the audit of a deployment (:mod:`.canary_proxy`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.methods.attacks.membership import PERTURBATIONS
from ctxleak.mitigations.mechanisms import RELATIONS
from ctxleak.targets.base import TargetAnswer


def claim_fields(answer: TargetAnswer) -> dict[str, Any]:
    """The claim an answer says it was released under (a ``ctxleak serve`` answer's), under
    the keys of the influence run's mechanism records (``claim_eps``: null for no guarantee,
    ``claim_delta``, ``claim_relation``); nothing where the target does not say."""
    claim = answer.claim
    return {} if claim is None else {"claim_eps": claim.eps, "claim_delta": claim.delta,
                                     "claim_relation": claim.relation}


def answers_claim(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the target's answers say they were released under: the ``relation`` (``mixed``
    where they differ) and what it ``covers``, the largest ε per response (``eps_max``; None
    where an answer claims no guarantee), the largest δ, and how many of the ``answers`` said
    it; None where none did."""
    said = [r for r in records if "claim_relation" in r]
    if not said:
        return None
    relations = sorted({str(r["claim_relation"]) for r in said})
    relation = relations[0] if len(relations) == 1 else "mixed"
    eps = [r["claim_eps"] for r in said]
    return {"relation": relation, "covers": RELATIONS.get(relation, "the answers claim under "
                                                          "different relations"),
            "eps_max": None if any(e is None for e in eps) else float(max(eps)),
            "delta": float(max(r.get("claim_delta") or 0.0 for r in said)),
            "answers": len(said), "of": len(records)}


def document_eps(eps: float | None, delta: float, relation: str, queries: int) -> float | None:
    """The ε one document is claimed over the ``queries`` answers an attack asks of it, from a
    claim per response: ε × queries (basic composition) where the claim covers a document
    (relation ``document``, or ``context``: any replacement of the context) at δ = 0; None
    otherwise: a shard's ε is not a document's, and the attacks' lower bound is one on a
    pure ε, which an (ε, δ) claim does not bound."""
    if eps is None or delta != 0 or relation not in ("document", "context"):
        return None
    return float(eps * queries)


def queries_per_document(attacks: Sequence[str], questions: int,
                         perturbations: int = PERTURBATIONS) -> int:
    """The most answers one membership attack reads of a document: the interrogation
    attack's ``questions``, the calibrated attack's 1 + ``perturbations``, the others' one."""
    return max(questions if "interrogation" in attacks else 1,
               1 + perturbations if "calibrated" in attacks else 1)


__all__ = ["answers_claim", "claim_fields", "document_eps", "queries_per_document"]
