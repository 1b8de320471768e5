"""ICLInf per exemplar and per position, and the run's verdict ("Evaluating Privacy Leakage From
In-Context Learning", Eq. 4; the readings of :mod:`ctxleak.methods.verdict`).

``loss_{j,i}`` (nats) is the largest change of a log-probability of query j's output when
exemplar i is removed: the output is up to e^loss times more (or less) likely with the exemplar,
the ε of ex-post per-instance DP of that exemplar at that query. Per exemplar (a training row, by
its index in the training data) the largest loss it caused on any query it served; per position
the mean loss over queries (the paper's Fig. 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.verdict import NATS_AS_EPS, listing, make_verdict, num, ratio_text

UNITS = {
    "iclinf": "ICLInf_j and its mean: " + NATS_AS_EPS,
    "by_exemplar": "per training exemplar, the largest and mean loss_{j,i} over the queries it "
                   "served: " + NATS_AS_EPS,
    "by_position": "per exemplar position, the mean loss_{j,i} over queries: " + NATS_AS_EPS,
    "accuracy": "fraction of queries whose most likely label is the true one",
    "time_per_query_s": "seconds",
}


def by_exemplar(records: Sequence[dict[str, Any]], shots: int, variant: str
                ) -> list[dict[str, Any]]:
    """Per training exemplar (index into the training data) at ``shots``/``variant``: the
    largest loss it caused (``max_loss``, nats), at which query, its mean loss and how many
    queries it served; most leaking first."""
    seen: dict[int, dict[str, Any]] = {}
    for r in records:
        if int(r.get("shots", -1)) != shots or variant not in r.get("variants", {}):
            continue
        losses = r["variants"][variant]["loss_by_position"]
        for position, (index, loss) in enumerate(zip(r["exemplar_indices"], losses), 1):
            if loss is None or not math.isfinite(loss):
                continue
            e = seen.setdefault(int(index), {"exemplar": int(index), "max_loss": -math.inf,
                                             "query": None, "position": None, "sum": 0.0,
                                             "queries": 0})
            e["sum"] += loss
            e["queries"] += 1
            if loss > e["max_loss"]:
                e.update(max_loss=float(loss), query=r.get("id"), position=position)
    out = [{"exemplar": e["exemplar"], "max_loss": e["max_loss"],
            "mean_loss": e["sum"] / e["queries"], "queries": e["queries"],
            "query": e["query"], "position": e["position"]} for e in seen.values()]
    return sorted(out, key=lambda e: (-e["max_loss"], e["exemplar"]))


def by_position(mean_loss_by_position: Sequence[float]) -> list[dict[str, Any]]:
    """Per exemplar position (1 = first in the prompt): the mean loss over queries (nats)."""
    return [{"position": i, "mean_loss": float(v)}
            for i, v in enumerate(mean_loss_by_position, 1)]


def icl_verdict(summary: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Which exemplars and positions leak most, at the run's first shot count and variant."""
    shots, variant = int(summary["shots"][0]), summary["variants"][0]
    s = summary["iclinf"][str(shots)][variant]
    exemplars = by_exemplar(records, shots, variant)
    positions = by_position(s["mean_loss_by_position"])
    rule = ("ICLInf_j is the largest change of a log-probability of query j's output when one "
            "exemplar is removed (Eq. 4), in nats: an ex-post per-instance ε, the output up to "
            "e^x times more likely with the exemplar; exemplars are ranked by the largest loss "
            "they caused on any query, positions by their mean loss over queries.")
    if not s["n"]:
        return make_verdict(f"No query was measured at {shots} shots ({variant}).", rule)
    text = (f"At {shots} shots ({variant}), ICLInf is {num(s['iclinf_mean'])} nats over "
            f"{s['n']} queries (likelihood ratio {ratio_text(s['iclinf_mean'])})")
    if exemplars:
        top = [f"training row {e['exemplar']} ({num(e['max_loss'])} nats on query {e['query']})"
               for e in exemplars[:3]]
        text += f"; the exemplars that leak most are {listing(top)}"
    if positions:
        worst = max(positions, key=lambda p: p["mean_loss"])
        text += (f"; position {worst['position']} of {len(positions)} leaks most on average "
                 f"({num(worst['mean_loss'])} nats)")
    return make_verdict(text + ".", rule)


__all__ = ["UNITS", "by_exemplar", "by_position", "icl_verdict"]
