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

The summary itself is not rewritten: every type here keeps the mapping it was read from, and
``to_dict`` gives it back with the typed fields written over it, in its own order and with
every key it does not read, so ``SettingSummary.from_dict(d).to_dict() == d`` and what is saved
stays byte for byte what its producer wrote.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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


def overlay(source: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``source`` with ``values`` written over it, in ``source``'s order; a key ``source``
    lacks is added only where its value says something (neither None nor False)."""
    out = dict(source)
    for key, value in values.items():
        if key in source or (value is not None and value is not False):
            out[key] = value
    return out


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` where it is a mapping; anything else is refused, naming ``where``."""
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _as_read() -> Any:
    """The field that keeps the mapping a value was read from (not compared, not shown)."""
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % bootstrap interval (:func:`ctxleak.methods.stats.mean_with_ci`), in
    the unit of what it estimates: nats per token for a leak, a score in [0, 1] for a utility,
    nats per response for ε. ``mean`` is None where no value was measured, the interval where
    too few were to give one."""

    mean: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def read(cls, value: Any, where: str) -> Estimate | None:
        """``value`` read as an estimate, None staying None; a mapping without ``mean`` is
        refused, naming ``where``."""
        if value is None:
            return None
        got = _mapping(value, where)
        if "mean" not in got:
            raise missing_key(where, "mean", got)
        return cls(got["mean"], got.get("ci_low"), got.get("ci_high"), got)

    def to_dict(self) -> dict[str, Any]:
        """The estimate as read (its n, median, std and the interval's method included)."""
        return overlay(self.source, {"mean": self.mean, "ci_low": self.ci_low,
                                     "ci_high": self.ci_high})


def mean_of(estimate: Estimate | None) -> float | None:
    """The mean of ``estimate``; None where there is none."""
    return None if estimate is None else estimate.mean


@dataclass(frozen=True)
class Claim:
    """What a setting claims over its answers
    (:func:`ctxleak.methods.influence.mechanism_mode.claim_summary`): the neighbouring
    ``relation`` the claim covers (:data:`~ctxleak.mitigations.mechanisms.RELATIONS`, ``"none"``
    where it claims nothing), ε per response (a mean over the answers with its interval, nats)
    and the largest δ."""

    relation: str | None
    eps: Estimate | None = None
    delta: float | None = None
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def read(cls, value: Any, where: str) -> Claim | None:
        """``value`` read as a claim, None staying None; one without ``relation`` is refused."""
        if value is None:
            return None
        got = _mapping(value, where)
        if "relation" not in got:
            raise missing_key(where, "relation", got)
        return cls(got["relation"], Estimate.read(got.get("eps"), f"{where}.eps"),
                   got.get("delta"), got)

    def to_dict(self) -> dict[str, Any]:
        """The claim as read (what it covers and its largest ε included)."""
        return overlay(self.source, {"relation": self.relation, "eps": _plain(self.eps),
                                     "delta": self.delta})


@dataclass(frozen=True)
class Control:
    """A setting's control (:func:`ctxleak.methods.influence.control.control_summary`): the
    influence above the control per token (nats per token; None where no example had a
    control) and, where it was not run, the ``reason``."""

    above_control_per_token: Estimate | None = None
    reason: str | None = None
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def read(cls, value: Any, where: str) -> Control | None:
        """``value`` read as a control, None staying None."""
        if value is None:
            return None
        got = _mapping(value, where)
        return cls(Estimate.read(got.get("above_control_per_token"),
                                 f"{where}.above_control_per_token"), got.get("reason"), got)

    def to_dict(self) -> dict[str, Any]:
        """The control as read (its flagged examples, rule and test included)."""
        return overlay(self.source, {
            "above_control_per_token": _plain(self.above_control_per_token),
            "reason": self.reason})


@dataclass(frozen=True)
class FactGroup:
    """One fact group of a setting's questions (:func:`.facts.fact_groups`): how many, the
    utilities on them (read on the "common" group) and the influence per token above the
    control and in all (nats per token, read on the "private" group)."""

    n: int
    match: Estimate | None = None
    exact_match: Estimate | None = None
    f1: Estimate | None = None
    rouge_l: Estimate | None = None
    above_control_per_token: Estimate | None = None
    influence_per_token: Estimate | None = None
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def read(cls, value: Any, where: str) -> FactGroup:
        """``value`` read as a fact group; one without ``n`` is refused, naming ``where``."""
        got = _mapping(value, where)
        if "n" not in got:
            raise missing_key(where, "n", got)

        def estimate(key: str) -> Estimate | None:
            return Estimate.read(got.get(key), f"{where}.{key}")

        return cls(got["n"], match=estimate("match"), exact_match=estimate("exact_match"),
                   f1=estimate("f1"), rouge_l=estimate("rouge_l"),
                   above_control_per_token=estimate("above_control_per_token"),
                   influence_per_token=estimate("influence_per_token"), source=got)

    def to_dict(self) -> dict[str, Any]:
        """The group as read."""
        return overlay(self.source, {
            "n": self.n, **{k: _plain(v) for k, v in zip(FACT_UTILITIES, self.utilities())},
            "above_control_per_token": _plain(self.above_control_per_token),
            "influence_per_token": _plain(self.influence_per_token)})

    def utilities(self) -> tuple[Estimate | None, ...]:
        """The group's utilities in the order of :data:`.facts.FACT_UTILITIES`."""
        return self.match, self.exact_match, self.f1, self.rouge_l


@dataclass(frozen=True)
class FactGroups:
    """A setting's questions split by fact group (:data:`.facts.FACTS`): both groups, or the
    summary has none."""

    common: FactGroup
    private: FactGroup
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def read(cls, value: Any, where: str) -> FactGroups | None:
        """``value`` read as the fact groups, None staying None; a group missing is refused."""
        if value is None:
            return None
        got = _mapping(value, where)
        for group in FACTS:
            if group not in got:
                raise missing_key(where, group, got)
        return cls(FactGroup.read(got["common"], f"{where}.common"),
                   FactGroup.read(got["private"], f"{where}.private"), got)

    def to_dict(self) -> dict[str, Any]:
        """The groups as read."""
        return overlay(self.source, {"common": self.common.to_dict(),
                                     "private": self.private.to_dict()})


def _plain(value: Estimate | Claim | Control | FactGroups | None) -> dict[str, Any] | None:
    return None if value is None else value.to_dict()


@dataclass(frozen=True)
class SettingSummary:
    """The summary of one setting of an influence run, as the frontier reads it: the setting's
    key (:attr:`ctxleak.methods.influence.setting.Setting.key`), λ, temperature, bounded CID's ε
    per token or the other mechanism's key, the questions measured (``n``), the utilities
    (:data:`.facts.FACT_UTILITIES`), the mean influence per token (nats), the control, the
    claim (ε per response; bounded CID's composed ε in a run from before claims were recorded)
    with the tokens paid per response, and the fact groups. ``lambda_`` is the summary's
    ``lambda``."""

    setting: str
    lambda_: float | None = None
    temperature: float | None = None
    n: int | None = None
    mechanism: str | None = None
    bounded_eps: float | None = None
    added_baseline: bool = False
    match: Estimate | None = None
    exact_match: Estimate | None = None
    f1: Estimate | None = None
    rouge_l: Estimate | None = None
    influence_per_token: Estimate | None = None
    control: Control | None = None
    claim: Claim | None = None
    tokens_paid: Estimate | None = None
    composed_eps: Estimate | None = None
    fact_groups: FactGroups | None = None
    source: Mapping[str, Any] = _as_read()

    @classmethod
    def from_dict(cls, data: Any, where: str = "the setting's summary") -> SettingSummary:
        """A setting's summary as plain data read once; one without ``setting``, or with a
        figure, control, claim or fact group missing what it holds, is refused, naming
        ``where`` (``settings[2]``), the key and the keys found."""
        got = _mapping(data, where)
        if "setting" not in got:
            raise missing_key(where, "setting", got)
        where = f"{where} ({got['setting']})"

        def estimate(key: str) -> Estimate | None:
            return Estimate.read(got.get(key), f"{where}.{key}")

        return cls(
            setting=got["setting"], lambda_=got.get("lambda"), temperature=got.get("temperature"),
            n=got.get("n"), mechanism=got.get("mechanism"), bounded_eps=got.get("bounded_eps"),
            added_baseline=bool(got.get("added_baseline")),
            match=estimate("match"), exact_match=estimate("exact_match"), f1=estimate("f1"),
            rouge_l=estimate("rouge_l"),
            influence_per_token=estimate("influence_per_token"),
            control=Control.read(got.get("control"), f"{where}.control"),
            claim=Claim.read(got.get("claim"), f"{where}.claim"),
            tokens_paid=estimate("tokens_paid"), composed_eps=estimate("composed_eps"),
            fact_groups=FactGroups.read(got.get("fact_groups"), f"{where}.fact_groups"),
            source=got)

    def to_dict(self) -> dict[str, Any]:
        """The summary as read, every key it holds in its order, with the typed fields
        written over it: ``SettingSummary.from_dict(d).to_dict() == d``."""
        return overlay(self.source, {
            "setting": self.setting, "lambda": self.lambda_, "temperature": self.temperature,
            "n": self.n, "mechanism": self.mechanism, "bounded_eps": self.bounded_eps,
            "added_baseline": self.added_baseline,
            **{k: _plain(self.utility(k)) for k in FACT_UTILITIES},
            "influence_per_token": _plain(self.influence_per_token),
            "control": _plain(self.control), "claim": _plain(self.claim),
            "tokens_paid": _plain(self.tokens_paid), "composed_eps": _plain(self.composed_eps),
            "fact_groups": _plain(self.fact_groups)})

    def utility(self, key: str) -> Estimate | None:
        """The utility ``key`` (one of :data:`.facts.FACT_UTILITIES`: answer match, exact
        match, token F1, ROUGE-L); None where not measured."""
        return dict(zip(FACT_UTILITIES, (self.match, self.exact_match, self.f1,
                                         self.rouge_l)))[key]

    @property
    def above_control(self) -> Estimate | None:
        """The influence above the control per token (nats per token); None without one."""
        return None if self.control is None else self.control.above_control_per_token

    def recorded(self, key: str) -> bool:
        """Whether the summary holds ``key``: as read (with a None value too), or set on it."""
        return key in self.source or self.to_dict().get(key) is not None

    def on_fact_groups(self, groups: FactGroups) -> SettingSummary:
        """The setting read on its fact groups: its utilities and ``n`` on the "common"
        questions, its influence per token and above the control on the "private" ones."""
        common, private = groups.common, groups.private
        control = replace(self.control or Control(),
                          above_control_per_token=private.above_control_per_token)
        return replace(self, n=common.n, match=common.match, exact_match=common.exact_match,
                       f1=common.f1, rouge_l=common.rouge_l,
                       influence_per_token=private.influence_per_token, control=control)


def read_summaries(settings: Sequence[SettingSummary | Mapping[str, Any]]
                   ) -> list[SettingSummary]:
    """Each setting's summary read once (:meth:`SettingSummary.from_dict`, ``settings[i]``
    naming where a key is missing); one read already is taken as it is."""
    return [s if isinstance(s, SettingSummary) else
            SettingSummary.from_dict(s, f"settings[{i}]") for i, s in enumerate(settings)]


def check_utilities(summaries: Sequence[SettingSummary]) -> None:
    """Refuse summaries that disagree on the utilities they record. Every summary of a run
    records each utility that any of them does (:data:`.facts.FACT_UTILITIES`, its value None
    where no record had a reference), so one a summary lacks is a key renamed or lost, named
    with the setting and the keys it has; summaries that record none are refused too."""
    recorded = [k for k in FACT_UTILITIES if any(s.recorded(k) for s in summaries)]
    if summaries and not recorded:
        first = summaries[0]
        raise InputError(f"settings[0] ({first.setting}) records none of the utilities "
                         f"({', '.join(FACT_UTILITIES)}; each is None where no record had a "
                         f"reference); its keys: {', '.join(sorted(map(str, first.source)))}")
    for i, s in enumerate(summaries):
        lacking = [k for k in recorded if not s.recorded(k)]
        if lacking:
            raise missing_key(f"settings[{i}] ({s.setting})", lacking[0], s.source)


__all__ = ["Claim", "Control", "Estimate", "FactGroup", "FactGroups", "SettingSummary",
           "check_utilities", "mean_of", "missing_key", "overlay", "read_summaries"]
