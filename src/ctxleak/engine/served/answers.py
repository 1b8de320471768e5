"""The checks of every number a served model answers, on every route (prompt log-probs,
candidate scoring, whole distributions), each answer on its own as it arrives: a log-prob is
finite (a whole distribution may hold -inf, a token of probability 0) and at most 0; the
probabilities of the distinct tokens of one position sum to at most 1 (a server whose log-probs
are shifted up sums above it); and no answer is the uniform distribution over the vocabulary (a
replica that lost its weights). Each failure is one :class:`ServerError` naming the server and
what it was answering; nothing measured from it is written.

An answer of one value cannot show a uniform or shifted distribution by itself, so the requests
that score one token carry the most likely tokens' log-probs with it (:data:`TOP_CHECKED`): the
most likely of V tokens is above 1/V unless every token is at 1/V.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxleak.engine.served_client import ServerError

LOGPROB_SLACK = 1e-4  # float noise above 0 that a log-prob may show
#: How far above 1 the probabilities of distinct tokens of one distribution may sum (float32
#: servers: a few 1e-6); a server whose log-probs are all shifted up sums far above it.
MASS_SLACK = 1e-3
#: How many of the most likely next tokens an answer scoring one token carries with it, so that
#: the answer can be checked on its own.
TOP_CHECKED = 5


def token_id(key: str) -> int:
    """An id from ``token_id:123`` (return_tokens_as_token_ids) or ``123``."""
    text = str(key)
    return int(text.rsplit(":", 1)[-1]) if text.startswith("token_id:") else int(text)


def ceiling(vocab_size: int) -> float:
    """-log of the tokenizer's size: no token of a distribution over V >= that many tokens is
    above it unless every token is (uniform)."""
    return -math.log(max(vocab_size, 2)) + 1e-6


def uniform_error(where: str, what: str, value: float) -> ServerError:
    return ServerError(f"the server at {where} answered the uniform distribution for {what} "
                       f"(every log-prob {value:.4f} nats, -log of the vocabulary size): "
                       "refused, as no trained model answers so")


def check_possible(row: np.ndarray, what: str, where: str, *, zero_mass: bool = False) -> None:
    """Every value a log-prob: finite (no NaN, no ±inf; with ``zero_mass``, -inf, a token of
    probability 0, is one too) and at most 0."""
    finite = np.isfinite(row) | (zero_mass & np.isneginf(row))
    if row.size and (not np.all(finite) or float(row.max()) > LOGPROB_SLACK):
        nan = bool(np.any(np.isnan(row)))
        largest = float(np.nanmax(row)) if not np.all(np.isnan(row)) else math.nan
        raise ServerError(f"the server at {where} answered impossible log-probs for {what} "
                          f"(largest {largest:.4g}, all finite: "
                          f"{bool(np.all(np.isfinite(row)))}"
                          f"{', NaN among them' if nan else ''}): refused")


def checked(values: Sequence[float], what: str, where: str, vocab_size: int) -> np.ndarray:
    """Log-probs of given tokens as float64, refused when impossible (:func:`check_possible`)
    or uniform over the vocabulary (two or more, all equal and at most -log V)."""
    row = np.asarray(values, dtype=np.float64)
    check_possible(row, what, where)
    # uniform over the model's V >= the tokenizer's size: one value, at most -log(size)
    if row.size >= 2 and float(np.ptp(row)) < 1e-9 and float(row.max()) <= ceiling(vocab_size):
        raise uniform_error(where, what, float(row[0]))
    return row


def checked_top(top: Any, what: str, where: str, vocab_size: int, *, tops: bool = True
                ) -> dict[int, float]:
    """One position's answered log-probs by token id (``{id or 'token_id:id': logprob}``, a
    value or ``{"logprob": value}``), checked on their own: possible (-inf allowed), the
    probabilities of the distinct tokens summing to at most 1, and, where they hold the most
    likely tokens (``tops``, two or more of them finite), the most likely above 1/V."""
    if not isinstance(top, dict) or not top:
        raise ServerError(f"the server at {where} answered no log-probs of the most likely "
                          f"tokens for {what} ('top_logprobs')")
    try:
        by_id = {token_id(k): float(v["logprob"] if isinstance(v, dict) else v)
                 for k, v in top.items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerError(f"the server at {where} answered log-probs for {what} that are not "
                          f"numbers by token id ({exc})") from None
    values = np.fromiter(by_id.values(), dtype=np.float64, count=len(by_id))
    check_possible(values, what, where, zero_mass=True)
    mass = float(np.exp(values).sum())
    if mass > 1 + MASS_SLACK:
        raise ServerError(f"the server at {where} answered impossible log-probs for {what}: "
                          f"the probabilities of {len(by_id)} distinct tokens sum to "
                          f"{mass:.4g} > 1: refused")
    # the most likely of two or more tokens at or below 1/V: every token is at 1/V (a single
    # finite value may be a candidate the server masked the others around)
    if tops and int(np.isfinite(values).sum()) >= 2 and float(values.max()) <= ceiling(vocab_size):
        raise uniform_error(where, what, float(values.max()))
    return by_id


__all__ = ["LOGPROB_SLACK", "MASS_SLACK", "TOP_CHECKED", "check_possible", "checked",
           "checked_top", "ceiling", "token_id", "uniform_error"]
