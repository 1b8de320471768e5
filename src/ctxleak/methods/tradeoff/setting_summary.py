"""One influence setting's summary as the frontier reads it: typed, read once, by attribute.

:func:`ctxleak.methods.influence.summary.summarize_setting` writes each setting's summary as
plain data (``summary["settings"]``, saved in ``results.json``): the expected context influence
of "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" (Def. 3.3)
per token, the control, utility against the references, what the setting claims (bounded CID's
composed ε, Theorem B.1; another mechanism's claim) and the fact groups. :class:`SettingSummary`
reads the part the frontier reads, once, where the summaries enter it
(:func:`ctxleak.methods.tradeoff.frontier.frontier`, :func:`read_summaries`): a key missing there
is an error that names where, the key and the keys found (the nearest first where one is close,
a renamed key), not an empty column.

The types here only read: the summary's one writer is its producer, and what it saved is never
written back from them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxleak.errors import InputError
from ctxleak.methods.tradeoff.facts import FACT_UTILITIES, FACTS


def missing_key(where: str, key: str, found: Iterable[Any]) -> InputError:
    """The error for ``key`` missing at ``where`` (``settings[2].control``): the keys found
    there, the nearest named first where one is close to ``key`` (a key renamed)."""
    keys = sorted(map(str, found))
    near = difflib.get_close_matches(key, keys, n=1)
    hint = f" (renamed? it has {near[0]!r})" if near else ""
    return InputError(f"{where} has no {key!r}{hint}; its keys: {', '.join(keys) or 'none'}")


def mapping_with(value: Any, where: str, *required: str) -> Mapping[str, Any]:
    """``value`` where it is a mapping holding every ``required`` key; anything else is
    refused, naming ``where`` (and the key missing, :func:`missing_key`)."""
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a mapping, got {type(value).__name__}")
    for key in required:
        if key not in value:
            raise missing_key(where, key, value)
    return value


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % bootstrap interval (:func:`ctxleak.methods.stats.mean_with_ci`), in
    the unit of what it estimates: nats per token for a leak, a score in [0, 1] for a utility,
    nats per response for ε. ``mean`` is None where no value was measured, the interval where
    too few were to give one."""

    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


def estimate(got: Mapping[str, Any], key: str, where: str) -> Estimate | None:
    """``got[key]`` read as an estimate, None where it is absent or None; one that is no
    mapping, or has no ``mean``, is refused, naming ``where.key``."""
    if got.get(key) is None:
        return None
    value = mapping_with(got[key], f"{where}.{key}", "mean")
    return Estimate(value["mean"], value.get("ci_low"), value.get("ci_high"))


def mean_of(estimate: Estimate | None) -> float | None:
    """The mean of ``estimate``; None where there is none."""
    return None if estimate is None else estimate.mean


@dataclass(frozen=True)
class Measured:
    """What was measured on a setting's questions, or on one fact group of them
    (:func:`.facts.fact_groups`): how many (``n``), the utilities (:data:`.facts.FACT_UTILITIES`:
    answer match, exact match, token F1, ROUGE-L, scores in [0, 1]) and the influence per
    token, in all and above the control (nats per token); each None where not measured."""

    n: int | None = None
    match: Estimate | None = None
    exact_match: Estimate | None = None
    f1: Estimate | None = None
    rouge_l: Estimate | None = None
    influence_per_token: Estimate | None = None
    above_control_per_token: Estimate | None = None

    @classmethod
    def read(cls, got: Mapping[str, Any], where: str,
             control: Mapping[str, Any] | None = None) -> Measured:
        """The figures of ``got`` (a fact group, or a setting's summary with its ``control``,
        which holds the influence above the control), ``where`` naming it in an error."""
        above = (estimate(got, "above_control_per_token", where) if control is None else
                 estimate(control, "above_control_per_token", f"{where}.control"))
        return cls(n=got.get("n"), match=estimate(got, "match", where),
                   exact_match=estimate(got, "exact_match", where),
                   f1=estimate(got, "f1", where), rouge_l=estimate(got, "rouge_l", where),
                   influence_per_token=estimate(got, "influence_per_token", where),
                   above_control_per_token=above)

    def utility(self, key: str) -> Estimate | None:
        """The utility ``key`` (one of :data:`.facts.FACT_UTILITIES`); None where not
        measured."""
        return dict(zip(FACT_UTILITIES, (self.match, self.exact_match, self.f1,
                                         self.rouge_l)))[key]


@dataclass(frozen=True)
class FactGroups:
    """A setting's questions split by fact group (:data:`.facts.FACTS`): the figures on the
    "common" questions and on the "private" ones, each with its ``n``."""

    common: Measured
    private: Measured

    @classmethod
    def read(cls, value: Any, where: str) -> FactGroups | None:
        """``value`` read as the fact groups, None staying None; a group missing, or one
        without ``n``, is refused, naming ``where``."""
        if value is None:
            return None
        got = mapping_with(value, where, *FACTS)
        return cls(*(Measured.read(mapping_with(got[g], f"{where}.{g}", "n"), f"{where}.{g}")
                     for g in FACTS))


@dataclass(frozen=True)
class Guarantee:
    """What a setting claims, as its row shows it: ε per response (the mean over its answers;
    bounded CID's composed ε, Theorem B.1, in a run from before claims were recorded; None
    where it claims nothing), δ, the relation the claim covers
    (:data:`~ctxleak.mitigations.mechanisms.RELATIONS`) and the tokens paid per response."""

    eps: float | None = None
    delta: float | None = None
    relation: str | None = None
    tokens_paid: float | None = None

    @classmethod
    def read(cls, got: Mapping[str, Any], where: str) -> Guarantee:
        """The guarantee of a setting's summary ``got``: its ``claim``
        (:func:`ctxleak.methods.influence.mechanism_mode.claim_summary`, ε None under the
        relation ``"none"``) with ``tokens_paid``; without a claim, bounded CID's
        ``composed_eps`` (δ 0, the whole context), or nothing. A claim without ``relation``
        is refused, naming ``where``."""
        paid, composed = estimate(got, "tokens_paid", where), estimate(got, "composed_eps", where)
        if got.get("claim") is not None:
            claim = mapping_with(got["claim"], f"{where}.claim", "relation")
            eps = mean_of(estimate(claim, "eps", f"{where}.claim"))
            return cls(eps if claim["relation"] != "none" else None, claim.get("delta"),
                       claim["relation"], mean_of(paid))
        if got.get("bounded_eps") is None:
            return cls()
        return cls(mean_of(composed), 0.0, "context")


@dataclass(frozen=True)
class SettingSummary:
    """The summary of one setting of an influence run, as the frontier reads it: the setting's
    key (:attr:`ctxleak.methods.influence.setting.Setting.key`), what was ``measured``
    (:class:`Measured`), λ, temperature, bounded CID's ε per token or the other mechanism's
    key, why there is no control where there is none, what it claims (:class:`Guarantee`),
    the fact groups, and the keys the summary holds (for an error naming them).
    ``lambda_`` is the summary's ``lambda``."""

    setting: str
    measured: Measured
    lambda_: float | None = None
    temperature: float | None = None
    mechanism: str | None = None
    bounded_eps: float | None = None
    added_baseline: bool = False
    no_control: str | None = None
    guarantee: Guarantee = Guarantee()
    fact_groups: FactGroups | None = None
    keys: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Any, where: str = "the setting's summary") -> SettingSummary:
        """A setting's summary as plain data read once; one without ``setting``, or with a
        figure, control, claim or fact group missing what it holds, is refused, naming
        ``where`` (``settings[2]``), the key and the keys found."""
        got = mapping_with(data, where, "setting")
        where = f"{where} ({got['setting']})"
        control = mapping_with({} if got.get("control") is None else got["control"],
                          f"{where}.control")
        return cls(
            setting=got["setting"], measured=Measured.read(got, where, control),
            lambda_=got.get("lambda"), temperature=got.get("temperature"),
            mechanism=got.get("mechanism"), bounded_eps=got.get("bounded_eps"),
            added_baseline=bool(got.get("added_baseline")), no_control=control.get("reason"),
            guarantee=Guarantee.read(got, where),
            fact_groups=FactGroups.read(got.get("fact_groups"), f"{where}.fact_groups"),
            keys=tuple(map(str, got)))

    def on_fact_groups(self, groups: FactGroups) -> SettingSummary:
        """The setting read on its fact groups: its utilities and ``n`` on the "common"
        questions, its influence per token and above the control on the "private" ones."""
        private = groups.private
        return replace(self, measured=replace(
            groups.common, influence_per_token=private.influence_per_token,
            above_control_per_token=private.above_control_per_token))


def read_summaries(settings: Sequence[Mapping[str, Any]]) -> list[SettingSummary]:
    """Each setting's summary read once (:meth:`SettingSummary.from_dict`, ``settings[i]``
    naming where a key is missing)."""
    return [SettingSummary.from_dict(s, f"settings[{i}]") for i, s in enumerate(settings)]


def check_utilities(summaries: Sequence[SettingSummary]) -> None:
    """Refuse summaries that disagree on the utilities they record. Every summary of a run
    records each utility that any of them does (:data:`.facts.FACT_UTILITIES`, its value None
    where no record had a reference), so one a summary lacks is a key renamed or lost, named
    with the setting and the keys it has; summaries that record none are refused too."""
    kept = [k for k in FACT_UTILITIES if any(k in s.keys for s in summaries)]
    if summaries and not kept:
        first = summaries[0]
        raise InputError(f"settings[0] ({first.setting}) records none of the utilities "
                         f"({', '.join(FACT_UTILITIES)}; each is None where no record had a "
                         f"reference); its keys: {', '.join(sorted(first.keys))}")
    for i, s in enumerate(summaries):
        lacking = [k for k in kept if k not in s.keys]
        if lacking:
            raise missing_key(f"settings[{i}] ({s.setting})", lacking[0], s.keys)


__all__ = ["Estimate", "FactGroups", "Guarantee", "Measured", "SettingSummary",
           "check_utilities", "estimate", "mapping_with", "mean_of", "missing_key",
           "read_summaries"]
