"""What a probe record of ``samples.jsonl`` must satisfy (ProPILE: Probing Privacy Leakage in
Large Language Models, App. B.1.1): token log-probabilities ≤ 0, the log-likelihood their sum
and the normalised one their mean; in context, the influence (Def. 3.1-3.2 of the
context-influence paper) the sum of its token influences and the context share in [0, 1]."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods import checks as rules
from ctxleak.run.samples import RowProblem


def _sum(row: Mapping[str, Any], total: str, parts: str) -> RowProblem | None:
    values, value = row.get(parts), row.get(total)
    if isinstance(values, list) and all(map(rules.is_number, values)) and rules.is_number(value):
        stored = float(sum(values))
        if not rules.close(float(value), stored, 1e-9 * (1 + abs(stored))):
            return total, f"{value!r} is not the sum of {parts} ({stored!r})"
    return None


def likelihoods(row: Mapping[str, Any]) -> RowProblem | None:
    """``target_ll`` = Σ ``target_logprobs``, one per ``target_tokens``; the normalised
    log-likelihoods are the totals over the token counts."""
    logprobs, tokens = row.get("target_logprobs"), row.get("target_tokens")
    if isinstance(logprobs, list) and rules.is_number(tokens) and len(logprobs) != tokens:
        return "target_logprobs", f"holds {len(logprobs)} values for {tokens!r} target tokens"
    problem = _sum(row, "target_ll", "target_logprobs") or _sum(row, "influence",
                                                                "token_influence")
    if problem:
        return problem
    for norm, total, n in (("target_ll_norm", "target_ll", "target_tokens"),
                           ("null_ll_norm", "null_ll", "null_tokens")):
        value, whole, size = row.get(norm), row.get(total), row.get(n)
        if rules.is_number(value) and rules.is_number(whole) and rules.is_number(size) and size:
            if not rules.close(float(value), whole / size, 1e-9 * (1 + abs(whole))):
                return norm, f"{value!r} is not {total} / {n} = {whole / size!r}"
    return None


#: The checks of a probe record.
CHECKS = rules.RecordChecks(
    bounds=(
        rules.count("shots_k"), rules.count("target_tokens", 1), rules.count("null_tokens", 1),
        rules.count("context_truncated_tokens"),
        rules.log_probability("target_ll"), rules.log_probability("target_ll_norm"),
        rules.log_probability("target_logprobs.*"), rules.log_probability("null_ll"),
        rules.log_probability("null_ll_norm"), rules.log_probability("no_context_ll"),
        rules.log_probability("no_context_ll_norm"),
        rules.nonnegative("token_influence.*", "an influence, nats"),
        rules.nonnegative("influence", "an influence, nats"), rules.probability("context_share"),
    ),
    cross=(likelihoods,),
    summary=(rules.count("hits"), rules.probability("groups.*.exact_match_rate"),
             rules.probability("groups.*.wilcoxon.pvalue"),
             rules.probability("significance.groups.*.pvalue")),
)
