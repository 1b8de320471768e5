"""The privacy–utility frontier, typed: one :class:`FrontierRow` per setting of an influence
sweep, read by attribute, with its paired utility differences (:class:`Difference`) and what it
claims (:class:`.setting_summary.Guarantee`), and the :class:`Frontier` that holds them with its
recommendation ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models", §4: what lowering λ or bounding ε per token costs in utility).

A frontier leaves :func:`ctxleak.methods.tradeoff.frontier.frontier` as plain data
(``summary["frontier"]``, saved in ``results.json``, shown as tables and frames):
:meth:`Frontier.to_dict` writes it, each row's columns (:data:`ctxleak.methods.tradeoff.frontier.
COLUMNS`) in the order the frontier has always written them, and :meth:`Frontier.read` reads it
back once where the report shows it: a column missing there is an error naming the row and the
key, not an empty column.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ctxleak.methods.tradeoff.facts import FACT_UTILITIES
from ctxleak.methods.tradeoff.setting_summary import (
    Estimate,
    Guarantee,
    SettingSummary,
    mapping_with,
)
from ctxleak.methods.tradeoff.utility import paired_difference

#: The columns of one utility ``k`` in a row, each ``f"{k}{part}"``: its mean and interval,
#: then its paired difference to the baseline and that interval.
SCORE_PARTS = ("", "_ci_low", "_ci_high", "_difference", "_difference_ci_low",
               "_difference_ci_high")

#: The columns every saved row has held since the frontier was written, which the report
#: shows: a row without one is refused; the others read as None where a run lacks them.
SHOWN = ("setting", "label", "privacy", "privacy_ci_low", "privacy_ci_high", "eps_guarantee",
         "utility", "utility_ci_low", "utility_ci_high", "utility_difference",
         "difference_ci_low", "difference_ci_high")

#: The keys of a setting the frontier skipped (:func:`skipped`).
SKIPPED = ("setting", "label", "reason")


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
        """``f1``, ``f1_ci_low``, ``f1_ci_high``, ``f1_difference`` and its interval
        (:data:`SCORE_PARTS`)."""
        value, diff = self.value, self.difference
        return dict(zip((f"{self.key}{part}" for part in SCORE_PARTS), (
            value.mean, value.ci_low, value.ci_high, diff.mean, diff.ci_low, diff.ci_high)))

    @classmethod
    def read(cls, got: Mapping[str, Any], key: str) -> Score:
        """The utility ``key`` of a saved row, from the columns :meth:`columns` writes (None
        where a run lacks them)."""
        v = [got.get(f"{key}{part}") for part in SCORE_PARTS]
        return cls(key, Estimate(v[0], v[1], v[2]), Difference(v[3], v[4], v[5]))


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

    @classmethod
    def read(cls, data: Any, where: str) -> FrontierRow:
        """A row as :meth:`to_dict` wrote it, read once: one without a column of :data:`SHOWN`
        is refused, naming ``where`` and the key; another column a run lacks reads as None."""
        got = mapping_with(data, where, *SHOWN)
        return cls(
            setting=got["setting"], label=got["label"], mechanism=got.get("mechanism"),
            lambda_=got.get("lambda"), temperature=got.get("temperature"),
            bounded_eps=got.get("bounded_eps"),
            privacy=Estimate(got["privacy"], got["privacy_ci_low"], got["privacy_ci_high"]),
            guarantee=Guarantee(got["eps_guarantee"], got.get("delta"), got.get("relation"),
                                got.get("tokens_paid")),
            eps_lower=got.get("eps_lower"),
            utility=Estimate(got["utility"], got["utility_ci_low"], got["utility_ci_high"]),
            baseline=bool(got.get("baseline")), added_baseline=bool(got.get("added_baseline")),
            difference=Difference(got["utility_difference"], got["difference_ci_low"],
                                  got["difference_ci_high"], got.get("difference_pairs") or 0,
                                  got.get("difference_reason")),
            scores=tuple(Score.read(got, k) for k in FACT_UTILITIES),
            pareto=got.get("pareto"), utility_kept=got.get("utility_kept"))

    def score(self, key: str) -> Score:
        """The utility ``key`` (one of :data:`.facts.FACT_UTILITIES`) with its difference."""
        return next(s for s in self.scores if s.key == key)


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


@dataclass(frozen=True, kw_only=True)
class Frontier:
    """The frontier of a sweep (:func:`.frontier.frontier`), its fields in the order of its plain
    data: the ``privacy`` measure its rows read (nats per token), with ``privacy_note`` where
    a setting has no control; the ``utility`` (its name and ``utility_key``); ``keep``, the
    share of the best utility a recommendation keeps; ``questions``, the fewest any setting
    measured utility on, ``resolved`` where that is at least ``min_questions``; the questions
    per fact group (``facts``) and the ``fact_note`` that says so; the ``recommended``
    setting's key and the ``recommendation``; the settings ``skipped``; the rows."""

    privacy: str
    privacy_unit: str = "nats per token"
    privacy_note: str | None = None
    utility: str | None
    utility_key: str | None = None
    keep: float | None = None
    questions: int | None = None
    min_questions: int | None = None
    resolved: bool | None = None
    facts: Mapping[str, int] | None = None
    fact_note: str | None = None
    recommended: str | None = None
    recommendation: str
    skipped: tuple[Mapping[str, Any], ...] = ()
    rows: tuple[FrontierRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """The frontier as plain data (``summary["frontier"]``), keyed by its fields."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "skipped": [dict(s) for s in self.skipped],
                "rows": [row.to_dict() for row in self.rows]}

    @classmethod
    def read(cls, data: Any, where: str = "the frontier") -> Frontier:
        """A frontier as :meth:`to_dict` wrote it, read once: one without ``privacy``,
        ``utility``, ``recommendation`` or ``rows``, or with a row or a skipped setting
        (:data:`SKIPPED`) missing a key, is refused, naming ``where`` and the key; another
        field a run from before it lacks reads as its default."""
        got = mapping_with(data, where, "privacy", "utility", "recommendation", "rows")
        return cls(**{f.name: got[f.name] for f in fields(cls)
                      if f.name in got and f.name not in ("skipped", "rows")},
                   skipped=tuple(mapping_with(s, f"{where}.skipped[{i}]", *SKIPPED)
                                 for i, s in enumerate(got.get("skipped") or ())),
                   rows=tuple(FrontierRow.read(r, f"{where}.rows[{i}]")
                              for i, r in enumerate(got["rows"])))


__all__ = ["NOTHING", "SCORE_PARTS", "SHOWN", "SKIPPED", "Difference", "Frontier", "FrontierRow",
           "Score", "difference", "skipped", "utility_columns"]
