"""Conformance checks for mechanisms, as scikit-learn's ``check_estimator`` and
``parametrize_with_checks`` are for estimators: :func:`check_mechanism` runs every check of
:mod:`.checks` on a mechanism (a third party's or one of ctxleak's) and returns what each found;
:func:`parametrize_with_checks` makes one pytest case per mechanism and check.

    from ctxleak.testing import check_mechanism
    check_mechanism(MyMechanism(eps=2.0)).raise_if_failed()

The checks run on the digit copier (:func:`digit_copier`), a tiny model whose weights are set by
hand, in seconds on a CPU; nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.mitigations.mechanisms import Mechanism
from ctxleak.testing.bench import Bench, CheckFailed
from ctxleak.testing.checks import CHECKS, CheckRecord, MechanismChecks
from ctxleak.testing.digit_copier import digit_copier


def check_mechanism(mechanism: Mechanism, *, checks: Sequence[str] | None = None,
                    bench: Bench | None = None) -> MechanismChecks:
    """Run ``checks`` (default: all of :data:`~.checks.CHECKS`, by name) on ``mechanism`` and
    return what each found (:class:`~.checks.MechanismChecks`; ``raise_if_failed()`` to fail a
    test). ``bench``: the model and decoding to run on (default: the digit copier, 4 tokens at
    temperature 0.8)."""
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        from ctxleak.errors import ConfigError

        raise ConfigError(f"checks: {', '.join(unknown)} not among {', '.join(CHECKS)}",
                          param="checks")
    bench = bench or Bench(digit_copier())
    key = mechanism.key() if hasattr(mechanism, "key") else type(mechanism).__name__
    out = MechanismChecks(key)
    for name in names:
        try:
            out.records.append(CheckRecord(name, True, CHECKS[name](mechanism, bench)))
        except CheckFailed as exc:
            out.records.append(CheckRecord(name, False, str(exc)))
    return out


def parametrize_with_checks(mechanisms: Sequence[Mechanism]) -> Any:
    """A ``pytest.mark.parametrize`` of ``(mechanism, check)`` over every mechanism and check;
    the test calls ``check(mechanism)``, which raises :class:`CheckFailed` on a failure::

        @parametrize_with_checks([MyMechanism(eps=2.0)])
        def test_my_mechanism(mechanism, check):
            check(mechanism)
    """
    import pytest

    bench: list[Bench] = []  # one digit copier for every case, made at the first

    def runner(name: str) -> Any:
        def run(mechanism: Mechanism) -> str:
            if not bench:
                bench.append(Bench(digit_copier()))
            return CHECKS[name](mechanism, bench[0])
        run.__name__ = name
        return run

    cases = [pytest.param(m, runner(name), id=f"{m.key()}-{name}")
             for m in mechanisms for name in CHECKS]
    return pytest.mark.parametrize(("mechanism", "check"), cases)


__all__ = ["Bench", "CheckFailed", "CheckRecord", "MechanismChecks", "check_mechanism",
           "digit_copier", "parametrize_with_checks"]
