"""Fact groups: a question whose answer many documents state (an organisation's common
knowledge) or one document alone (a person's record). A defence that is differentially private
over the datastore's documents ("Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy", Koga, Wu and Chaudhuri; "RAG with Differential Privacy", Grislain) can
answer the first and must refuse the second, so a frontier reads utility on the common-fact
questions and the leak on the private-fact ones (:func:`fact_groups`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.stats import mean_with_ci

#: The fact groups a record may belong to (``record["fact"]``): "common", a fact many documents
#: state, and "private", one only its own document holds (None: neither).
FACTS = ("common", "private")

#: The utilities read per fact group (where the records have them).
FACT_UTILITIES = ("match", "exact_match", "f1", "rouge_l")


def fact_groups(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any] | None:
    """A setting's records split by ``record["fact"]``, where they hold both groups (None
    otherwise): ``{"common": {"n", "match", "exact_match", "f1", "rouge_l"}, "private": {"n",
    "above_control_per_token", "influence_per_token"}}``, each figure a mean with its
    bootstrap interval (None where no record of the group has it). The frontier reads utility
    on the common-fact questions and privacy loss on the private-fact questions
    (:func:`ctxleak.methods.tradeoff.frontier.fact_views`)."""
    wanted = (*FACT_UTILITIES, "influence_above_control_per_token")
    rows: dict[str, list[dict[str, Any]]] = {f: [] for f in FACTS}
    for r in records:  # what the groups read of each record, not the record
        if r.get("fact") in rows:
            per_token = r.get("influence_per_token")
            if per_token is None and r.get("response_ids") and r.get("influence") is not None:
                per_token = r["influence"] / len(r["response_ids"])
            rows[r["fact"]].append({**{k: r.get(k) for k in wanted},
                                    "influence_per_token": per_token})
    if not all(rows.values()):
        return None

    def stats(group: str, key: str) -> dict[str, Any] | None:
        values = [r[key] for r in rows[group] if r.get(key) is not None]
        return mean_with_ci(values, seed=seed) if values else None

    return {"common": {"n": len(rows["common"]),
                       **{k: stats("common", k) for k in FACT_UTILITIES}},
            "private": {"n": len(rows["private"]),
                        "above_control_per_token": stats("private",
                                                         "influence_above_control_per_token"),
                        "influence_per_token": stats("private", "influence_per_token")}}


__all__ = ["FACTS", "FACT_UTILITIES", "fact_groups"]
