"""What a susceptibility record of ``samples.jsonl`` must satisfy (Efficiently Computing
Susceptibility to Context in Language Models): χ_MC a mutual information (a weighted sum of
KL divergences, ≥ 0), the draws' counts adding up to the number of draws, χ_F = ½σ²·tr I(e)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods import checks as rules
from ctxleak.run.samples import RowProblem

NATS = "nats"


def fisher_chi(row: Mapping[str, Any]) -> RowProblem | None:
    """χ_F = ½·σ²·tr I(e) (the Fisher estimate)."""
    chi, trace, sigma2 = row.get("chi_f"), row.get("fisher_trace"), row.get("sigma2")
    if rules.is_number(chi) and rules.is_number(trace) and rules.is_number(sigma2):
        want = 0.5 * sigma2 * trace
        if not rules.close(float(chi), want, 1e-9 * (1 + abs(want))):
            return "chi_f", f"{chi!r} is not ½·sigma2·fisher_trace = {want!r}"
    return None


def draws(row: Mapping[str, Any]) -> RowProblem | None:
    """The counts of the drawn contexts add up to ``n_draws``."""
    counts = (row.get("context_draws") or {}).get("count")
    n = row.get("n_draws")
    if isinstance(counts, list) and all(map(rules.is_number, counts)) and rules.is_number(n) \
            and sum(counts) != n:
        return "context_draws.count", f"adds up to {sum(counts)!r}, not n_draws = {n!r}"
    return None


#: The checks of a susceptibility record and of its summary's counts.
CHECKS = rules.RecordChecks(
    bounds=(
        rules.nonnegative("chi_mc", "a mutual information, nats"),
        rules.nonnegative("chi_mc_nocontext", "a KL divergence, nats"),
        rules.count("n_draws", 1), rules.count("n_distinct_contexts"), rules.count("n_entity_draws"),
        rules.count("context_pool_size"), rules.count("context_draws.pool_index.*"),
        rules.count("context_draws.count.*", 1), rules.count("contexts_truncated"),
        rules.count("context_tokens_cut"), rules.count("n_query_tokens"),
        rules.nonnegative("persuasive_contexts.*.psi", "a KL divergence, nats"),
        rules.probability("persuasive_contexts.*.weight"),
        rules.probability("reference_top_tokens.*.prob"), rules.count("reference_top_tokens.*.id"),
        rules.nonnegative("answer_entropy", NATS), rules.nonnegative("chi_f", "χ_F"),
        rules.nonnegative("fisher_trace", "a Fisher information trace"),
        rules.Bound("sigma2", 0, None, "a variance σ²", open_low=True),
        rules.probability("fisher_mass"), rules.probability("fisher_top_tokens.*.prob"),
        rules.count("fisher_top_tokens.*.id"), rules.nonnegative("fisher_top_tokens.*.grad_sq_norm", ""),
    ),
    cross=(fisher_chi, draws),
    summary=(rules.count("n_queries"), rules.count("metrics.*.n")),
)
