"""What an ICLInf record of ``samples.jsonl`` must satisfy (Evaluating Privacy Leakage From
In-Context Learning, Eq. 3-4): each position's loss max_y |log A(S)(y) − log A(S∖e_i)(y)| ≥ 0,
one per exemplar, ICLInf_j their largest, label distributions probabilities."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods.checks import (
    Bound,
    RecordChecks,
    count,
    find,
    is_number,
    nonnegative,
    probability,
)
from ctxleak.run.samples import RowProblem

NATS = "a loss, nats"


def iclinf_is_the_largest_loss(row: Mapping[str, Any]) -> RowProblem | None:
    """Eq. 4: ``iclinf`` = max over exemplars of ``loss_by_position``, one loss per
    exemplar."""
    exemplars = row.get("exemplar_indices")
    for where, variant in find(row, "variants.*"):
        if not isinstance(variant, dict):
            continue
        losses, top = variant.get("loss_by_position"), variant.get("iclinf")
        if not isinstance(losses, list) or not losses or not all(map(is_number, losses)):
            continue
        if isinstance(exemplars, list) and len(losses) != len(exemplars):
            return f"{where}.loss_by_position", (f"holds {len(losses)} losses for "
                                                 f"{len(exemplars)} exemplars")
        if is_number(top) and top != max(losses):
            return f"{where}.iclinf", (f"{top!r} is not the largest of loss_by_position "
                                       f"({max(losses)!r})")
    return None


#: The checks of an ICLInf record and of its summary's numbers that have a range.
CHECKS = RecordChecks(
    bounds=(
        count("shots"), count("query_index"), count("exemplar_indices.*"),
        count("prompt_tokens"), count("truncated_texts"),
        nonnegative("variants.*.loss_by_position.*", NATS),
        nonnegative("variants.*.iclinf", "ICLInf, nats"),
        probability("variants.*.dist.*"), probability("variants.*.loo_dists.*.*"),
        probability("variants.*.top_token.prob"), count("variants.*.top_token.id"),
        count("variants.*.max_at_token.*"),
    ),
    cross=(iclinf_is_the_largest_loss,),
    summary=(
        count("headline.shots"), count("shots.*"), count("n_queries"), count("iclinf.*.*.n"),
        Bound("iclinf.*.*.iclinf_mean", 0, None, "ICLInf, nats"),
        Bound("iclinf.*.*.iclinf_std", 0, None, "nats"),
        probability("iclinf.*.*.accuracy"),
        nonnegative("iclinf.*.*.mean_loss_by_position.*", NATS),
        nonnegative("by_exemplar.*.max_loss", NATS), nonnegative("by_exemplar.*.mean_loss", NATS),
        count("by_exemplar.*.queries"), nonnegative("by_position.*.mean_loss", NATS),
    ),
)
