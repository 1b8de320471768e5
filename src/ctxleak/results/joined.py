"""One frontier over several influence runs: the settings a team measured in separate runs
(a λ sweep today, a DP mechanism tomorrow, each as long as the machine allows) read as one
sweep, as if one run had measured them all.

That is sound only where the runs answered the same questions the same way, and each
setting's answers do not depend on which other settings ran beside it: every example draws
from its own seed whatever the setting's neighbours, and its control context is another
example's, so the same questions give the same controls. A join therefore asks the runs to
share their data (its SHA-256), their questions in order, and every option of the run but
those that name the settings or where the run was written (:data:`MAY_DIFFER`); a setting
measured by two runs (λ = 1, which every sweep adds) is read from the first that has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.ids import user_id

#: The options of a run that may differ between joined runs: the settings themselves (λ, T,
#: bounded ε, the mechanisms), where and how fast the run went (output, resume, batch size,
#: device, threads, timeouts), what it kept of the texts, the temperature the sweep
#: defaulted to (each setting's own T is in its key), and the data's path (its SHA-256,
#: ``input_sha256``, and the questions are compared instead).
MAY_DIFFER = frozenset({
    "lambda", "temperature", "bounded_eps", "mechanism", "mechanisms", "output", "resume",
    "batch_size", "device", "device_map", "threads", "request_timeout", "retries",
    "keep_texts", "deployed_temperature", "resolved_controls", "command", "limit", "data"})


@dataclass(frozen=True)
class Joined:
    """The runs' settings (``summary["settings"]`` entries, the first run's first) and the
    records of those settings, ready for :func:`ctxleak.methods.tradeoff.frontier.frontier`;
    ``notes``: one line per setting read from an earlier run than a later one that also
    measured it."""

    settings: tuple[dict[str, Any], ...]
    records: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def _name(run: Any) -> str:
    return str(getattr(run, "path", None) or "a run given in memory")


def questions(run: Any) -> list[str]:
    """The run's questions, in order: each example's own id, once."""
    return list(dict.fromkeys(user_id(r) for r in run.records))


def check_joinable(first: Any, other: Any) -> None:
    """Refuse, in one line naming both runs and the field, two runs that did not answer the
    same questions the same way (module docstring)."""
    a, b = first.config or {}, other.config or {}
    if a.get("command", "influence") != "influence" or b.get("command", "influence") != \
            "influence":
        raise ConfigError(f"{_name(other)} is a {b.get('command')} run: a frontier joins "
                          f"influence runs", param="runs")
    for key in sorted((set(a) | set(b)) - MAY_DIFFER):
        if a.get(key) != b.get(key):
            raise ConfigError(
                f"{_name(other)} ran with {key} {b.get(key)!r} and {_name(first)} with "
                f"{a.get(key)!r}: a frontier joins runs over the same questions, model and "
                f"options; rerun one with the other's {key}", param="runs")
    mine, theirs = questions(first), questions(other)
    if mine != theirs:
        gone = next((q for q in mine if q not in set(theirs)), None)
        extra = next((q for q in theirs if q not in set(mine)), None)
        where = (f"{gone!r} is not in it" if gone is not None else
                 f"{extra!r} is not in {_name(first)}" if extra is not None else
                 "the same questions come in another order")
        raise ConfigError(f"{_name(other)} answered other questions than {_name(first)} "
                          f"({len(theirs)} against {len(mine)}; {where}): join runs over "
                          f"the same data and --limit", param="runs")


def join_runs(first: Any, others: Sequence[Any]) -> Joined:
    """``first``'s settings and records, then each of ``others``' settings it has not seen
    (module docstring), every run checked against ``first`` (:func:`check_joinable`)."""
    settings: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    again: dict[str, list[str]] = {}  # a setting measured twice: the later runs that did
    for run in (first, *others):
        if run is not first:
            check_joinable(first, run)
        for s in run.summary.get("settings") or ():
            key = str(s.get("setting"))
            if key in seen:
                again.setdefault(key, []).append(_name(run))
                continue
            seen[key] = _name(run)
            settings.append(dict(s))
            records.extend(r for r in run.records if str(r.get("setting")) == key)
    notes = tuple(f"{key}: read from {seen[key]}, also measured by {', '.join(runs)}"
                  for key, runs in again.items())
    return Joined(tuple(settings), tuple(records), notes)


__all__ = ["MAY_DIFFER", "Joined", "check_joinable", "join_runs", "questions"]
