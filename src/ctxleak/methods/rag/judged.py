"""Which documents of an answer leaked ("Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", Def. 3.1-3.2 with S = one document): a document leaked in an
answer when its leave-one-out influence (nats) is above the per-document threshold set by decoy
documents left out the same way, or when the answer copied it (the record's ``copied``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def leaked_passages(record: Mapping[str, Any], threshold: float | None
                    ) -> dict[int, float | None]:
    """Passage j (0-based) -> its influence above ``threshold`` (nats; None without a
    threshold or a score) for each passage of ``record`` judged leaked: above the threshold, or
    copied by the answer."""
    influence = record.get("passage_influence") or []
    copied = {int(c["passage"]) for c in record.get("copied") or ()}
    out: dict[int, float | None] = {}
    for j, value in enumerate(influence):
        above = None if value is None or threshold is None else float(value) - threshold
        if (above is not None and above > 0) or j in copied:
            out[j] = above
    return out


__all__ = ["leaked_passages"]
