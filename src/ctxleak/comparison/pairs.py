"""Runs over the same data, paired per example.

A *side* is one run under one of its settings (influence: λ, T and context size; ICL: the
number of shots; the probe: mode, variant, group and k). Two sides are compared on the examples
they share, matched by the user's ``id`` (the probe: the subject's id, PII type and template):
for each example the difference left − right of each per-example quantity, the mean
difference with a t interval, and the Wilcoxon signed-rank test of the differences (two-sided),
as paired designs are read ("Individual Comparisons by Ranking Methods", Wilcoxon). Where n
cannot support a figure, it is None with the reason.

Which sides are compared (:func:`plan_contrasts`): one run, each of its settings against its
first; several runs, each run against the first, setting with setting by their values (λ, T,
context size, bounded ε), never by position. A value each of the two runs holds fixed but at a
different one (one run at λ = 1, another at λ = 0.5) is what the runs differ by: the settings
are matched on the others. A setting with no match in the other run is listed, not paired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

#: The confidence of the paired interval and the level the signed-rank test is read at.
LEVEL = 0.95
ALPHA = 0.05

Setting = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Quantity:
    """A per-example figure compared between sides: its name, unit and reading."""

    name: str
    unit: str
    value: Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Pairing:
    """How a method's records pair: the setting columns that split a run into sides, the
    columns that name an example across sides, the quantities compared, and the config keys
    the settings cover (left out of what a run is described by)."""

    setting: Callable[[dict[str, Any]], Setting]
    unit: Callable[[dict[str, Any]], tuple[tuple[str, Any], ...]]
    quantities: tuple[Quantity, ...]
    sweeps: tuple[str, ...] = ()


def _get(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda r: r.get(name)


def _per_token(r: dict[str, Any]) -> float | None:
    n = len(r.get("response_ids") or [])
    return r["influence"] / n if n and r.get("influence") is not None else None


def _context(r: dict[str, Any]) -> Any:
    if "context_limit" in r:
        return "all" if r["context_limit"] is None else r["context_limit"]
    return str(r.get("setting", "")).rpartition("context=")[2] or "all"


def _iclinf(r: dict[str, Any]) -> float | None:
    variants = r.get("variants") or {}
    first = next(iter(variants.values()), None)
    return None if first is None else first.get("iclinf")


def _exact(r: dict[str, Any]) -> float | None:
    em = r.get("exact_match")
    return None if em is None else float(em)


PAIRINGS: dict[str, Pairing] = {
    "influence": Pairing(
        # bounded CID's ε per token splits sides too: λ = 1 plain and λ = 1 at ε = 2 differ
        setting=lambda r: (("λ", r.get("lambda")), ("T", r.get("temperature")),
                           ("context", _context(r)),
                           ("bounded ε", "none" if r.get("eps") is None else r["eps"])),
        unit=lambda r: (("id", r["id"]),),
        quantities=(
            Quantity("influence", "nats, summed over the response", _get("influence")),
            Quantity("influence per token", "nats per response token", _per_token),
            Quantity("max n-gram influence", "nats", _get("max_window_influence")),
            # the utility a setting keeps: against the example's references (SQuAD's token F1
            # and exact match, ROUGE-L F1), the cost of a mitigation read per example
            Quantity("F1", "token F1 against the references (0-1)", _get("f1")),
            Quantity("exact match", "1 = the answer equals a reference, 0 = not",
                     _exact),
            Quantity("ROUGE-L", "ROUGE-L F1 against the references (0-1)", _get("rouge_l"))),
        sweeps=("lambda", "temperature", "context_sizes", "bounded_eps")),
    "icl": Pairing(
        setting=lambda r: (("shots", r.get("shots")),),
        unit=lambda r: (("id", r["id"]),),
        quantities=(Quantity("ICLInf", "nats (largest change of a label's log-probability "
                                       "when one exemplar is left out)", _iclinf),),
        sweeps=("shots",)),
    "susceptibility": Pairing(
        setting=lambda r: (),
        unit=lambda r: (("id", r["id"]),),
        quantities=(
            Quantity("χ_MC", "nats (mutual information of answer and context)",
                     _get("chi_mc")),
            Quantity("χ_MC (no-context ref.)", "nats", _get("chi_mc_nocontext")),
            Quantity("χ_F", "Fisher scale, for ranking queries (not nats)", _get("chi_f")))),
    "probe": Pairing(
        setting=lambda r: (("mode", r.get("mode")), ("variant", r.get("variant")),
                           ("group", r.get("group")), ("k", r.get("shots_k"))),
        unit=lambda r: (("id", r["id"]), ("pii_type", r.get("pii_type")),
                        ("template", r.get("template"))),
        quantities=(
            Quantity("target log-likelihood", "nats (log-probability of the true PII)",
                     _get("target_ll")),
            Quantity("exact match", "1 = the PII was generated, 0 = not", _exact)),
        sweeps=("shots",)),
}

#: Why a method's runs are not paired.
UNPAIRED = {
    "audit": "the audit's sequences are generated afresh by each run: there are no shared "
             "examples to pair",
    "influence-explain": "an explanation is one prompt: there is nothing to pair",
}


@dataclass
class Side:
    """One run under one setting: its examples' values by unit."""

    run: int
    setting: Setting
    values: dict[tuple[tuple[str, Any], ...], dict[str, Any]]
    label: str = ""


@dataclass
class Contrast:
    """Two sides compared on the examples they share."""

    left: Side
    right: Side
    label: str
    units: list[tuple[tuple[str, Any], ...]] = field(default_factory=list)
    only_left: int = 0
    only_right: int = 0
    stats: list[dict[str, Any]] = field(default_factory=list)

    @property
    def matched(self) -> str:
        """How many examples were paired, out of each side's."""
        return (f"{len(self.units)} paired of {len(self.units) + self.only_left} "
                f"({self.left.label}) and {len(self.units) + self.only_right} "
                f"({self.right.label})")


def sides(pairing: Pairing, records_per_run: Sequence[Sequence[dict[str, Any]]]
          ) -> list[Side]:
    """Every (run, setting), its records' quantities by unit, settings in first-seen order."""
    out: list[Side] = []
    for i, records in enumerate(records_per_run):
        by_setting: dict[Setting, Side] = {}
        for r in records:
            s = pairing.setting(r)
            side = by_setting.setdefault(s, Side(i, s, {}))
            side.values[pairing.unit(r)] = {q.name: _finite(q.value(r))
                                            for q in pairing.quantities}
        out += list(by_setting.values())
    return out


def fixed_apart(per_run: Sequence[Iterable[Mapping[str, Any]]]) -> set[str]:
    """The names every run holds at one value, not the same value in all: what the runs
    differ by (λ = 1 in one, λ = 0.5 in the other), left out when settings are matched."""
    values: dict[str, list[set[str]]] = {}
    runs = [list(rows) for rows in per_run]
    for i, rows in enumerate(runs):
        for row in rows:
            for name, value in row.items():
                values.setdefault(name, [set() for _ in runs])[i].add(repr(value))
    return {name for name, seen in values.items()
            if all(len(s) == 1 for s in seen) and len(set.union(*seen)) > 1}


def _without(setting: Setting, names: set[str]) -> Setting:
    return tuple((name, v) for name, v in setting if name not in names)


def plan_contrasts(all_sides: Sequence[Side], runs: int
                   ) -> tuple[list[tuple[Side, Side]], list[tuple[Side, Side]]]:
    """Which sides are compared (see the module docstring), and the sides left unmatched,
    each with a side of the run it found no match in."""
    per_run = [[s for s in all_sides if s.run == i] for i in range(runs)]
    if runs == 1:
        return [(per_run[0][0], other) for other in per_run[0][1:]], []
    pairs: list[tuple[Side, Side]] = []
    unmatched: list[tuple[Side, Side]] = []
    for others in per_run[1:]:
        apart = fixed_apart([[dict(s.setting) for s in per_run[0]],
                             [dict(s.setting) for s in others]])
        by_key = {_without(b.setting, apart): b for b in others}
        common = [(a, by_key[_without(a.setting, apart)]) for a in per_run[0]
                  if _without(a.setting, apart) in by_key]
        pairs += common
        paired = {id(s) for pair in common for s in pair}
        unmatched += [(a, others[0]) for a in per_run[0] if id(a) not in paired]
        unmatched += [(b, per_run[0][0]) for b in others if id(b) not in paired]
    return pairs, unmatched


def contrast(left: Side, right: Side, label: str, quantities: Sequence[Quantity]) -> Contrast:
    """The two sides on their shared units, with the paired statistics of each quantity."""
    units = [u for u in left.values if u in right.values]
    c = Contrast(left, right, label, units, only_left=len(left.values) - len(units),
                 only_right=len(right.values) - len(units))
    for q in quantities:
        pairs = [(left.values[u][q.name], right.values[u][q.name]) for u in units]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if not pairs and all(v[q.name] is None for side in (left, right)
                             for v in side.values.values()):
            continue  # a quantity neither run measured
        c.stats.append({"comparison": label, "quantity": q.name, "unit": q.unit,
                        **paired_stats([a for a, _ in pairs], [b for _, b in pairs])})
    return c


def paired_stats(left: Sequence[float], right: Sequence[float]) -> dict[str, Any]:
    """Mean of each side, the mean difference left − right with its t interval at
    :data:`LEVEL`, and the two-sided Wilcoxon signed-rank p of the differences; a figure n
    cannot support is None, and ``note`` says why."""
    d = np.asarray(left, dtype=np.float64) - np.asarray(right, dtype=np.float64)
    n = len(d)
    out: dict[str, Any] = {"pairs": n, "left mean": _mean(left), "right mean": _mean(right),
                           "mean difference": float(d.mean()) if n else None,
                           "ci low": None, "ci high": None, "wilcoxon p": None}
    notes = []
    if n < 2:
        notes.append(f"no interval: {n} pair(s), at least 2 are needed")
    else:
        sd = float(d.std(ddof=1))
        half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
        out["ci low"], out["ci high"] = float(d.mean()) - half, float(d.mean()) + half
    nonzero = int(np.count_nonzero(d))
    need = smallest_signed_rank_n(ALPHA)
    if n and nonzero == 0:
        notes.append("no test: every difference is 0")
    elif nonzero < need:
        notes.append(f"no test: {nonzero} non-zero difference(s), the signed-rank test "
                     f"needs {need} to reach p < {ALPHA:g} (smallest p here "
                     f"{2.0 ** (1 - max(nonzero, 1)):.3g})")
    else:
        out["wilcoxon p"] = float(stats.wilcoxon(d).pvalue)
    out["note"] = "; ".join(notes)
    return out


def smallest_signed_rank_n(alpha: float) -> int:
    """The fewest non-zero differences for which the exact two-sided signed-rank test can
    reject at ``alpha``: its smallest p, all differences of one sign, is 2 / 2^n."""
    n = 1
    while 2.0 ** (1 - n) > alpha:
        n += 1
    return n


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(np.asarray(values, dtype=np.float64))) if len(values) else None


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


__all__ = ["PAIRINGS", "UNPAIRED", "Contrast", "Pairing", "Quantity", "Side", "contrast",
           "fixed_apart", "paired_stats", "plan_contrasts", "sides", "smallest_signed_rank_n"]
