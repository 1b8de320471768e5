"""What a method's stored numbers must satisfy, declared next to its records
(``methods/<m>/checks.py``) and run on every row and summary that resume or
:func:`ctxleak.load_result` reads back: a hand-edited number is reported with its field even in a
run folder without a manifest.

A :class:`RecordChecks` holds :class:`Bound` ranges (a δ in (0, 1), a probability in [0, 1], a
log-probability ≤ 0, a count an integer ≥ 0), for rows and for the summary, and the method's
cross-checks: functions of a row that return ``(field, what is wrong)`` where two stored numbers
disagree (a response influence that is not the sum of its token influences). Every number in a
row must be finite: ctxleak refuses to store any other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from ctxleak.run.inputs import non_finite
from ctxleak.run.samples import RowProblem

#: How far past a closed bound a float may lie (float error: a log-probability of 1e-12).
SLACK = 1e-9

#: A cross-check of one row: its problem, or None.
CrossCheck = Callable[[Mapping[str, Any]], "RowProblem | None"]


def find(value: Any, pattern: str, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of everything under ``value`` at the dotted ``pattern`` (``*``: any
    key or list position), paths written ``a.b[0].c``."""
    yield from _find(value, pattern.split(".") if pattern else [], where)


def _find(value: Any, parts: list[str], where: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        yield where, value
        return
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head] if head in value else []
        for k in keys:
            yield from _find(value[k], rest, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list) and head == "*":
        for i, item in enumerate(value):
            yield from _find(item, rest, f"{where}[{i}]")


def is_number(value: Any) -> TypeGuard[float]:
    """A JSON number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Bound:
    """The range of the numbers at ``path`` (null passes; NaN does not): ``low``/``high``
    inclusive (within :data:`SLACK`) unless ``open_low``/``open_high``; ``integer``: whole
    numbers; ``what``: the quantity, named in the message."""

    path: str
    low: float | None = None
    high: float | None = None
    what: str = ""
    integer: bool = False
    open_low: bool = False
    open_high: bool = False

    def describe(self) -> str:
        lo = None if self.low is None else f"{'>' if self.open_low else '≥'} {self.low:g}"
        hi = None if self.high is None else f"{'<' if self.open_high else '≤'} {self.high:g}"
        if lo and hi:
            span = (f"in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.open_high else ']'}")
        else:
            span = lo or hi or "a number"
        kind = "an integer " if self.integer else ""
        return f"must be {kind}{span}" + (f" ({self.what})" if self.what else "")

    def holds(self, x: float) -> bool:
        if math.isnan(x):
            return False
        if self.integer and not float(x).is_integer():
            return False
        slack = 0.0 if self.integer else SLACK
        if self.low is not None and (x <= self.low if self.open_low else x < self.low - slack):
            return False
        return self.high is None or not (
            x >= self.high if self.open_high else x > self.high + slack)

    def problem(self, value: Any, where: str = "") -> RowProblem | None:
        for at, x in find(value, self.path, where):
            if x is None:
                continue
            if not is_number(x) or not self.holds(float(x)):
                return at, f"{self.describe()}, got {x!r}"
        return None


def close(a: float, b: float, tol: float) -> bool:
    """``|a − b| ≤ tol`` (False for anything not finite)."""
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tol


def rounding_tol(values: Sequence[Any], total: float, digits: int = 6) -> float:
    """How far the stored sum of unrounded values may lie from the sum of ``values`` stored
    rounded to ``digits`` places: half a unit of the last place each, and float error."""
    return len(values) * 0.5 * 10.0 ** -digits + 1e-9 * (1 + abs(total))


@dataclass(frozen=True)
class RecordChecks:
    """A method's checks of what it stores: row ``bounds``, row ``cross`` checks, ``summary``
    bounds and ``summary_cross`` checks."""

    bounds: tuple[Bound, ...] = ()
    cross: tuple[CrossCheck, ...] = ()
    summary: tuple[Bound, ...] = ()
    #: Cross-checks of the summary (two stored numbers that disagree), run after its bounds;
    #: their fields are paths from ``summary.``.
    summary_cross: tuple[CrossCheck, ...] = ()

    def row_problem(self, row: Mapping[str, Any]) -> RowProblem | None:
        """The first problem of a ``samples.jsonl`` row: a number that is not finite, out of
        its range, or that disagrees with another."""
        bad = non_finite(dict(row))
        if bad is not None:
            return bad, "not a finite number (ctxleak stores none)"
        for bound in self.bounds:
            problem = bound.problem(row)
            if problem:
                return problem
        for check in self.cross:
            problem = check(row)
            if problem:
                return problem
        return None

    def summary_problem(self, summary: Mapping[str, Any]) -> RowProblem | None:
        """The first number of a summary out of its range (paths from ``summary.``)."""
        for bound in self.summary:
            problem = bound.problem(summary, "summary")
            if problem:
                return problem
        for check in self.summary_cross:
            problem = check(summary)
            if problem:
                return f"summary.{problem[0]}", problem[1]
        return None


def probability(path: str) -> Bound:
    return Bound(path, 0, 1, "a probability")


def log_probability(path: str) -> Bound:
    return Bound(path, None, 0, "a log-probability, nats")


def count(path: str, low: int = 0) -> Bound:
    return Bound(path, low, None, "a count", integer=True)


def nonnegative(path: str, what: str) -> Bound:
    return Bound(path, 0, None, what)
