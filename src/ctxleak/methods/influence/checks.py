"""What an influence record of ``samples.jsonl`` must satisfy (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.1-3.2): token influences
``τ_t = |log p̄_λ(y_t|D) − log p(y_t|∅)| ≥ 0``, the response influence their sum, the control's
the same, per-token figures the total over the response's length, CID's λ_t in [0, λ].

The per-token lists are stored rounded to 6 places (:mod:`.pipeline`), the totals unrounded:
sums are compared within half a unit of the sixth place per token (:func:`rounding_tol`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.methods.checks import (
    Bound,
    RecordChecks,
    close,
    count,
    find,
    is_number,
    log_probability,
    nonnegative,
    probability,
    rounding_tol,
)
from ctxleak.run.samples import RowProblem

NATS = "an influence, nats"


def _numbers(row: Mapping[str, Any], key: str) -> list[float] | None:
    values = row.get(key)
    if isinstance(values, list) and all(is_number(v) for v in values):
        return [float(v) for v in values]
    return None


def _sum_of(row: Mapping[str, Any], total: str, parts: str) -> RowProblem | None:
    """``row[total]`` is the sum of the rounded list ``row[parts]``."""
    values, value = _numbers(row, parts), row.get(total)
    if values is None or not is_number(value):
        return None
    stored = sum(values)
    if not close(float(value), stored, rounding_tol(values, float(value))):
        return total, (f"{value!r} is not the sum of its {parts} ({stored:.6f}): one of them "
                       "was changed after ctxleak wrote it")
    return None


def token_sums(row: Mapping[str, Any]) -> RowProblem | None:
    """Def. 3.1-3.2: each τ_t is |logp_context − logp_empty|, ``influence`` their sum, and the
    response has one of each per token."""
    ids = row.get("response_ids")
    lists = {k: _numbers(row, k) for k in ("token_influence", "logp_context", "logp_empty")}
    if isinstance(ids, list):
        for key, values in lists.items():
            if values is not None and len(values) != len(ids):
                return key, (f"holds {len(values)} values for {len(ids)} response tokens "
                             "(response_ids)")
    tau, with_d, without = lists.values()
    if tau is not None and with_d is not None and without is not None:
        for t, (v, a, b) in enumerate(zip(tau, with_d, without)):
            if not close(v, abs(a - b), 1.5e-6):
                return f"token_influence[{t}]", (f"{v!r} is not |logp_context − logp_empty| = "
                                                 f"{abs(a - b):.6f} at that token")
    return _sum_of(row, "influence", "token_influence")


def per_token(row: Mapping[str, Any]) -> RowProblem | None:
    """``response_tokens`` is the response's length and the per-token figures the totals over
    it."""
    ids, tokens = row.get("response_ids"), row.get("response_tokens")
    if isinstance(ids, list) and is_number(tokens) and tokens != len(ids):
        return "response_tokens", f"is {tokens!r}, but the response has {len(ids)} tokens"
    for part, total in (("influence_per_token", "influence"),
                        ("influence_above_control_per_token", "influence_above_control")):
        value, whole = row.get(part), row.get(total)
        if is_number(value) and is_number(whole) and is_number(tokens) and tokens:
            if not close(float(value), whole / tokens, 1e-9 * (1 + abs(whole))):
                return part, (f"{value!r} is not {total} / response_tokens = "
                              f"{whole / tokens!r}")
    return None


def control(row: Mapping[str, Any]) -> RowProblem | None:
    """The control's influence is the sum of its token influences,
    ``influence_above_control`` = influence − control_influence, the first of several controls
    is that one, and ``control_p`` is the example's rank among its controls."""
    problem = _sum_of(row, "control_influence", "control_token_influence")
    if problem:
        return problem
    above, total, ctrl = (row.get(k) for k in ("influence_above_control", "influence",
                                               "control_influence"))
    if is_number(above) and is_number(total) and is_number(ctrl):
        if not close(float(above), total - ctrl, 1e-9 * (1 + abs(total) + abs(ctrl))):
            return "influence_above_control", (f"{above!r} is not influence − "
                                               f"control_influence = {total - ctrl!r}")
    many, p = row.get("control_influences"), row.get("control_p")
    if isinstance(many, list) and many and is_number(ctrl) and is_number(many[0]):
        if not close(float(many[0]), ctrl, 1e-9 * (1 + abs(ctrl))):
            return "control_influences", (f"its first, {many[0]!r}, is not control_influence "
                                          f"= {ctrl!r} (the nearest control comes first)")
        if is_number(p) and is_number(total) and all(is_number(c) for c in many):
            want = (1 + sum(1 for c in many if c >= total)) / (len(many) + 1)
            if not close(float(p), want, 1e-12):
                return "control_p", (f"{p!r} is not (1 + controls at or above the influence) "
                                     f"/ (controls + 1) = {want!r}")
    return None


def bounded(row: Mapping[str, Any]) -> RowProblem | None:
    """Bounded CID (Thm B.1): each λ_t in [0, λ], ``composed_eps`` = ε per released token."""
    lam, lambdas, eps = row.get("lambda"), _numbers(row, "lambdas"), row.get("eps")
    if lambdas is not None and is_number(lam):
        for t, v in enumerate(lambdas):
            if v > lam + 1e-6:
                return f"lambdas[{t}]", f"{v!r} is above the run's λ = {lam!r}"
        if is_number(eps) and is_number(row.get("composed_eps")):
            want = eps * len(lambdas)
            if not close(float(row["composed_eps"]), want, 1e-9 * (1 + want)):
                return "composed_eps", (f"{row['composed_eps']!r} is not eps × released "
                                        f"tokens = {want!r}")
    return _sum_of(row, "composed_eps_ex_post", "token_eps_ex_post")


def maxima(row: Mapping[str, Any]) -> RowProblem | None:
    """``max_window_influence`` and ``max_passage_influence`` are the largest of their lists."""
    for top, values in (("max_window_influence", "window_influence"),
                        ("max_passage_influence", "passage_influence")):
        listed: Sequence[Any] = row.get(values) or []
        known = [float(v) for v in listed if is_number(v)]
        value = row.get(top)
        if known and is_number(value) and not close(float(value), max(known), 1e-6):
            return top, f"{value!r} is not the largest of {values} ({max(known):.6f})"
    return _top_passage(row)


def _top_passage(row: Mapping[str, Any]) -> RowProblem | None:
    """``max_passage`` numbers (from 1) a passage whose influence is ``max_passage_influence``,
    and ``max_passage_id`` is that passage's name in ``passage_ids``."""
    number, listed = row.get("max_passage"), row.get("passage_influence")
    if not isinstance(number, int) or isinstance(number, bool) or not isinstance(listed, list):
        return None
    if not 1 <= number <= len(listed):
        return "max_passage", (f"{number!r} is not a passage number (1 to {len(listed)}, "
                               "numbered from 1)")
    value, top = listed[number - 1], row.get("max_passage_influence")
    if is_number(value) and is_number(top) and not close(float(value), float(top), 1e-6):
        return "max_passage", (f"passage {number}'s influence {value!r} is not "
                               f"max_passage_influence {top!r}")
    names = row.get("passage_ids")
    if isinstance(names, list) and len(names) == len(listed) and "max_passage_id" in row \
            and row["max_passage_id"] != names[number - 1]:
        return "max_passage_id", (f"{row['max_passage_id']!r} is not passage {number}'s id "
                                  f"{names[number - 1]!r}")
    return None


#: The ledger per document (``settings.*.documents.*``, "Estimating Privacy Leakage of Augmented
#: Contextual Knowledge in Language Models", Def. 3.1 with S = one document): its counts and nats.
LEDGER = "settings.*.documents.*."
LEDGER_BOUNDS = (
    *(count(f"{LEDGER}{k}") for k in ("retrieved", "scored", "leaked", "copied", "flagged",
                                       "pii_carried")),
    *(nonnegative(f"{LEDGER}{k}", NATS) for k in (
        "leak_max", "leak_sum", "influence_sum", "influence_max", "influence_per_token",
        "influence_per_token_max", "worst_answer.above")))


def ledger_counts(summary: Mapping[str, Any]) -> RowProblem | None:
    """Each document's line of the ledger agrees with itself: scored and leaked at most as
    often as retrieved, copied and flagged at most as often as leaked, its largest leak and
    influence at most their sums."""
    pairs = (("scored", "retrieved"), ("leaked", "retrieved"), ("copied", "leaked"),
             ("flagged", "leaked"), ("leak_max", "leak_sum"),
             ("influence_max", "influence_sum"))
    for where, row in find(summary, LEDGER.rstrip(".")):
        if not isinstance(row, Mapping):
            continue
        for small, large in pairs:
            a, b = row.get(small), row.get(large)
            if is_number(a) and is_number(b) and a > b + 1e-6 * (1 + abs(b)):
                return f"{where}.{small}", f"{a!r} is above its {large} {b!r}"
    return None


#: The checks of an influence record (and of the summary numbers that have a range).
CHECKS = RecordChecks(
    bounds=(
        Bound("lambda", 0, None, "CID's λ"),
        Bound("temperature", 0, None, "a temperature", open_low=True),
        count("context_tokens"), count("context_truncated_by"), count("response_ids.*"),
        count("response_tokens"), count("ngram", 1), count("max_window"),
        count("known_tokens.*"), count("copied_tokens.*"), count("max_passage", 1),
        log_probability("logp_context.*"), log_probability("logp_empty.*"),
        log_probability("window_logp.*.*"),
        nonnegative("token_influence.*", NATS), nonnegative("influence", NATS),
        nonnegative("influence_per_token", NATS), nonnegative("control_influence", NATS),
        nonnegative("control_token_influence.*", NATS),
        nonnegative("control_influences.*", NATS), probability("control_p"),
        nonnegative("window_influence.*", NATS), nonnegative("max_window_influence", NATS),
        nonnegative("passage_influence.*", NATS), nonnegative("max_passage_influence", NATS),
        probability("context_token_fraction"), probability("rouge_context"),
        probability("rouge_l"), probability("exact_match"), probability("f1"),
        probability("match"),
        Bound("eps", 0, None, "bounded CID's ε per token (0: λ_t = 0)"),
        Bound("lambdas.*", 0, None, "CID's λ_t"), nonnegative("composed_eps", "ε"),
        nonnegative("token_eps_ex_post.*", "ε"), nonnegative("composed_eps_ex_post", "ε"),
    ),
    cross=(token_sums, control, per_token, bounded, maxima),
    summary=(count("settings.*.n"), Bound("settings.*.lambda", 0, None, "CID's λ"),
             Bound("settings.*.temperature", 0, None, "a temperature", open_low=True),
             Bound("settings.*.influence.mean", 0, None, NATS),
             *(probability(f"settings.*.{k}.mean") for k in ("rouge_l", "exact_match", "f1",
                                                              "match")),
             # a sweep's frontier: utility a score in [0, 1], its difference in [-1, 1]
             *(probability(f"frontier.rows.*.{k}") for k in ("utility", "utility_ci_low",
                                                             "utility_ci_high")),
             Bound("frontier.rows.*.utility_difference", -1, 1, "a difference of two scores"),
             nonnegative("frontier.rows.*.eps_guarantee", "ε"), *LEDGER_BOUNDS),
    summary_cross=(ledger_counts,),
)
