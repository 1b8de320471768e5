"""Where the context leaked (Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, Def. 3.1-3.2 on n-gram windows): each context token's share of the response
influence, from the windows that cover it, and the examples and passages that leaked most across a
dataset.

A window ``D_{i,n}`` has influence ``τ_{i,n} = Σ_t |log p̄(y_t|D) − log p̄(y_t|D∖D_{i,n})|`` on the
response (Def. 3.2). A context token ``j`` gets the mean ``τ_{i,n}`` of the windows covering it;
with ``--ngram N --stride 1`` that is a moving average of width N centred near j, with the default
stride (= N) it is its window's value. Tokens that no window covers get None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def context_token_scores(n_tokens: int, spans: Sequence[Sequence[int]],
                         values: Sequence[float]) -> list[float | None]:
    """The mean influence ``τ_{i,n}`` of the windows ``[start, end)`` covering each of the
    ``n_tokens`` context tokens (None where no window covers a token)."""
    if len(spans) != len(values):
        raise ValueError(f"{len(spans)} windows but {len(values)} window influences")
    total = [0.0] * n_tokens
    count = [0] * n_tokens
    for (start, end), value in zip(spans, values):
        if not 0 <= start <= end <= n_tokens:
            raise ValueError(f"window [{start}, {end}) is outside a context of {n_tokens} tokens")
        for j in range(start, end):
            total[j] += float(value)
            count[j] += 1
    return [t / c if c else None for t, c in zip(total, count)]


def ranked_examples(records: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of ``records`` by response influence, largest first (ties keep input order)."""
    return sorted(range(len(records)), key=lambda i: -float(records[i]["influence"]))


def top_passages(records: Sequence[dict[str, Any]], k: int = 20) -> list[tuple[int, int]]:
    """The ``k`` (record index, window index) pairs with the most influence over all records
    with n-gram windows, largest first."""
    pairs = [(float(v), i, w) for i, r in enumerate(records)
             for w, v in enumerate(r.get("window_influence") or [])]
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    return [(i, w) for _, i, w in pairs[:k]]


__all__ = ["context_token_scores", "ranked_examples", "top_passages"]
