"""Which queries are most susceptible to context, against their ceiling, and the run's verdict
("Efficiently Computing Susceptibility to Context in Language Models"; the readings of
:mod:`ctxleak.methods.verdict`).

χ_MC (marginal reference) is the mutual information of context and answer, ``I(C; A | q)``, in
nats. No mutual information exceeds the entropy of either side, so its ceiling is
``min(H(A | q), H(C))``: ``H(A | q)`` the entropy of the answer distribution p̄(·|q) (the
marginal over the sampled contexts, ``answer_entropy`` of each record) and ``H(C)`` that of the
sampled contexts' empirical distribution (from their draw counts). ``χ_MC / ceiling`` says how
much of what could move, moved. χ_F (Fisher susceptibility) is on another scale (½σ² times a
Fisher-information trace): it ranks queries, it is never read as nats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.methods.verdict import listing, make_verdict, num

UNITS = {
    "chi_mc": "nats: mutual information I(C; A | q) of context and answer (marginal reference)",
    "chi_mc_nocontext": "nats: expected KL divergence from the no-context answer distribution "
                        "(not a mutual information; no ceiling)",
    "chi_f": "a different scale (½σ² times a Fisher-information trace): ranks queries, not nats",
    "ceiling": "nats: min(H(A|q), H(C)), the largest χ_MC the query could have",
    "share_of_ceiling": "χ_MC / ceiling, a fraction in [0, 1]",
}
TOP_QUERIES = 5


def context_entropy(record: dict[str, Any]) -> float | None:
    """``H(C)`` (nats) of the contexts drawn for one query, from their draw counts."""
    counts = [c for c in ((record.get("context_draws") or {}).get("count") or []) if c > 0]
    total = sum(counts)
    if not total:
        return None
    return float(-sum(c / total * math.log(c / total) for c in counts))


def ceiling(record: dict[str, Any]) -> float | None:
    """The ceiling of a query's χ_MC: ``min(H(A|q), H(C))`` of those the record has (nats)."""
    bounds = [b for b in (record.get("answer_entropy"), context_entropy(record))
              if b is not None and math.isfinite(b)]
    return min(bounds) if bounds else None


def top_queries(records: Sequence[dict[str, Any]], key: str, *, marginal: bool,
                limit: int = TOP_QUERIES) -> list[dict[str, Any]]:
    """The ``limit`` queries with the largest ``key``, with their ceiling and share of it (χ_MC
    with the marginal reference only)."""
    rows = [r for r in records if r.get(key) is not None and math.isfinite(r[key])]
    rows.sort(key=lambda r: -r[key])
    out = []
    for r in rows[:limit]:
        row: dict[str, Any] = {"id": r.get("id"), "query": r.get("query"), key: r[key]}
        if key == "chi_mc" and marginal:
            top = ceiling(r)
            row["ceiling"] = top
            row["share_of_ceiling"] = r[key] / top if top else None
        out.append(row)
    return out


def susceptibility_verdict(summary: dict[str, Any], records: Sequence[dict[str, Any]],
                           reference: str = "marginal") -> dict[str, str]:
    """The queries most susceptible to context; χ_MC against its ceiling where the run has it,
    else χ_F as a ranking."""
    marginal = reference == "marginal"
    metrics = summary.get("metrics") or {}
    mc = "chi_mc" if marginal else "chi_mc_nocontext"
    if mc in metrics and metrics[mc]:
        top = top_queries(records, mc, marginal=marginal)
        names = [f"{q['id']} ({num(q[mc])} nats"
                 + (f", {num(100 * q['share_of_ceiling'], 2)}% of its "
                    f"{num(q['ceiling'])}-nat ceiling)" if q.get("share_of_ceiling") is not None
                    else ")") for q in top]
        mean = metrics[mc]["mean"]
        text = (f"The queries most susceptible to context are {listing(names)}; the mean "
                f"χ_MC over {metrics[mc]['n']} queries is {num(mean)} nats")
        shares = [s for s in (summary.get("ceiling") or {}).get("shares", []) if s is not None]
        if marginal and shares:
            text += f" ({num(100 * sum(shares) / len(shares), 2)}% of the ceiling on average)"
        rule = ("Queries are ranked by χ_MC, " + (
            "the mutual information of context and answer in nats, which can never exceed its "
            "ceiling min(H(A|q), H(C)): the entropy of the answer distribution over the sampled "
            "contexts (and of the contexts drawn); the share of the ceiling says how much of "
            "what could move, moved." if marginal else
            "the expected KL divergence from the no-context answer, in nats (not a mutual "
            "information: no ceiling)."))
        return make_verdict(text + ".", rule)
    top = top_queries(records, "chi_f", marginal=marginal)
    names = [f"{q['id']} (χ_F {num(q['chi_f'])})" for q in top]
    return make_verdict(
        f"The queries most susceptible to context, by Fisher susceptibility, are "
        f"{listing(names)}.",
        "Queries are ranked by χ_F, a different scale from χ_MC (½σ² times a Fisher-information "
        "trace, not nats): it orders queries, it does not say how many nats a context moves.")


def ceiling_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per run: the ceiling of each query's χ_MC and its share (in record order), their
    means."""
    tops = [ceiling(r) for r in records]
    shares = [r["chi_mc"] / t if t and r.get("chi_mc") is not None else None
              for r, t in zip(records, tops)]
    known = [t for t in tops if t is not None]
    known_shares = [s for s in shares if s is not None]
    return {"ceilings": tops, "shares": shares,
            "mean_ceiling": sum(known) / len(known) if known else None,
            "mean_share": sum(known_shares) / len(known_shares) if known_shares else None}


__all__ = ["UNITS", "ceiling", "ceiling_summary", "context_entropy", "susceptibility_verdict",
           "top_queries"]
