"""The rows of the privacy–utility frontier, typed: one :class:`FrontierRow` per setting of an
influence sweep, read by attribute, with its paired utility differences (:class:`Difference`)
and what it claims (:class:`.setting_summary.Guarantee`) ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", §4: what lowering λ or bounding ε per token
costs in utility).

A frontier's rows leave it as plain data (``summary["frontier"]["rows"]``, saved in
``results.json``, shown as tables and frames): :meth:`FrontierRow.to_dict` writes the columns
of :data:`ctxleak.methods.tradeoff.frontier.COLUMNS` in the order the frontier has always
written them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.methods.tradeoff.facts import FACT_UTILITIES
from ctxleak.methods.tradeoff.setting_summary import Estimate, Guarantee, SettingSummary
from ctxleak.methods.tradeoff.utility import paired_difference


@dataclass(frozen=True)
class Difference(Estimate):
    """A setting's utility minus its baseline's on the questions both answered, by the paired
    bootstrap of :func:`ctxleak.methods.tradeoff.utility.paired_difference`: the mean
    difference with its 95 % interval (a difference of two scores, in [-1, 1]), the pairs, and
    why there is none (or no interval)."""

    pairs: int = 0
    reason: str | None = None


@dataclass(frozen=True)
class Score:
    """One utility of a row (``key``, one of :data:`.facts.FACT_UTILITIES`) with its interval
    and its paired difference to the baseline; None where not measured."""

    key: str
    value: Estimate
    difference: Difference

    def columns(self) -> dict[str, Any]:
        """``f1``, ``f1_ci_low``, ``f1_ci_high``, ``f1_difference`` and its interval."""
        k, value, diff = self.key, self.value, self.difference
        return {k: value.mean, f"{k}_ci_low": value.ci_low, f"{k}_ci_high": value.ci_high,
                f"{k}_difference": diff.mean, f"{k}_difference_ci_low": diff.ci_low,
                f"{k}_difference_ci_high": diff.ci_high}


@dataclass(frozen=True)
class FrontierRow:
    """One setting on the frontier: its key and label, the mechanism (None for CID), λ, T and
    bounded CID's ε per token; the privacy loss (nats per token, with its 95 % interval: above
    the control, or the influence per token where a setting has no control); what it claims;
    ``eps_lower``, the ε a canary attack demonstrated (nats per response, 95 %); the utility
    the frontier reads, with its interval; whether it is the baseline (λ = 1 without a bound,
    ``added_baseline`` where the sweep did not ask for it); the paired utility difference to
    it; every utility with its own (``scores``); ``pareto`` (None where the row lacks privacy
    loss or utility) and ``utility_kept``, its share of the best utility."""

    setting: str
    label: str
    mechanism: str | None
    lambda_: float | None
    temperature: float | None
    bounded_eps: float | None
    privacy: Estimate
    guarantee: Guarantee
    eps_lower: float | None
    utility: Estimate
    baseline: bool
    added_baseline: bool
    difference: Difference
    scores: tuple[Score, ...]
    pareto: bool | None = None
    utility_kept: float | None = None

    @property
    def point(self) -> tuple[float, float] | None:
        """(privacy loss, utility) where the row has both and both are finite numbers; None
        otherwise (a NaN or infinite figure is never compared: :func:`.frontier.skipped`)."""
        p, u = self.privacy.mean, self.utility.mean
        return None if p is None or u is None or not (math.isfinite(p) and math.isfinite(u)) \
            else (p, u)

    def to_dict(self) -> dict[str, Any]:
        """The row as plain data, its columns in the frontier's order."""
        privacy, claim, utility, diff = (self.privacy, self.guarantee, self.utility,
                                         self.difference)
        return {
            "setting": self.setting, "label": self.label, "mechanism": self.mechanism,
            "lambda": self.lambda_, "temperature": self.temperature,
            "bounded_eps": self.bounded_eps, "privacy": privacy.mean,
            "privacy_ci_low": privacy.ci_low, "privacy_ci_high": privacy.ci_high,
            "eps_guarantee": claim.eps, "delta": claim.delta, "relation": claim.relation,
            "tokens_paid": claim.tokens_paid, "eps_lower": self.eps_lower,
            "utility": utility.mean, "utility_ci_low": utility.ci_low,
            "utility_ci_high": utility.ci_high, "baseline": self.baseline,
            "added_baseline": self.added_baseline, "utility_difference": diff.mean,
            "difference_ci_low": diff.ci_low, "difference_ci_high": diff.ci_high,
            "difference_pairs": diff.pairs, "difference_reason": diff.reason,
            **{k: v for score in self.scores for k, v in score.columns().items()},
            "pareto": self.pareto, "utility_kept": self.utility_kept}



#: What a row shows where a figure was not measured.
NOTHING = Estimate()


def utility_columns(setting: SettingSummary, mine: Sequence[dict[str, Any]],
                    base: Sequence[dict[str, Any]], is_base: bool,
                    seed: int) -> tuple[Score, ...]:
    """Answer match, exact match, token F1 and ROUGE-L of a setting, each with its interval
    and its paired difference to the baseline with that interval (None where not measured)."""
    out = []
    for k in FACT_UTILITIES:
        stats = setting.measured.utility(k)
        diff = difference(mine, base, k if stats is not None else None, is_base, seed)
        out.append(Score(k, stats or NOTHING, diff))
    return tuple(out)


def difference(rows: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]],
               key: str | None, is_base: bool, seed: int) -> Difference:
    """The row's utility difference to its baseline with a paired bootstrap interval; ``None``
    with the reason where it has none."""
    if key is None:
        return Difference(reason="no utility: no example has a reference")
    if is_base:
        return Difference(reason="the baseline (λ = 1, no bound)")
    if not base:
        return Difference(reason="no λ = 1 setting without a bound to compare with")
    if not rows:
        return Difference(reason="no records to pair")
    d = paired_difference(rows, base, key, seed=seed)
    return Difference(d["mean_difference"], d["ci_low"], d["ci_high"], d["pairs"],
                      d["ci_reason"])


def skipped(rows: Sequence[FrontierRow], privacy: str, utility: str | None
            ) -> list[dict[str, Any]]:
    """The rows the frontier compares with no other (their :attr:`FrontierRow.point` is None)
    because a figure is not a finite number: each as ``{"setting", "label", "reason"}``, the
    reason naming the figure and its value (``F1 is nan``)."""
    out = []
    for row in rows:
        bad = [f"{what} is {value}" for what, value in ((privacy, row.privacy.mean),
                                                        (utility or "utility", row.utility.mean))
               if value is not None and not math.isfinite(value)]
        if bad:
            out.append({"setting": row.setting, "label": row.label, "reason": "; ".join(bad)})
    return out


__all__ = ["NOTHING", "Difference", "FrontierRow", "Score", "difference", "skipped",
           "utility_columns"]
