"""Numbers a user gives (a keyword, a flag, a config file's value), read once with the type and
the domain they name: :func:`whole` for counts, :func:`real` for finite quantities. ``True`` is
not a number, ``12.5`` is not a count, an integer beyond float64 is refused rather than
overflowing later, and NaN and ±inf are never in a domain. Each refusal is one
:class:`~ctxleak.errors.ConfigError` naming the parameter.

This module imports nothing of ctxleak but its errors, so every layer (the targets, the
mitigations, the run) checks its numbers with it.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Literal, overload

from ctxleak.errors import ConfigError


def _refuse(name: str, message: str) -> ConfigError:
    """The error, naming ``name`` as its parameter when it is a keyword (``lam``), not a flag
    (``--lambda``), so that the CLI can show its flag instead."""
    return ConfigError(f"{name} {message}", param=None if name.startswith("-") else name)


def _shown(value: Any) -> str:
    """``value`` as an error shows it: a 400-digit integer is cut, not echoed whole."""
    text = repr(value)
    return f"{text[:20]}…" if len(text) > 24 else text


@overload
def whole(value: Any, name: str, *, minimum: int | None = ..., maximum: int | None = ...,
          allow_none: Literal[False] = ...) -> int: ...
@overload
def whole(value: Any, name: str, *, minimum: int | None = ..., maximum: int | None = ...,
          allow_none: bool) -> int | None: ...
def whole(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None,
          allow_none: bool = False) -> int | None:
    """``value`` as a count: an integer (a Python or NumPy one, not ``True``/``False``, not a
    float however whole) within ``[minimum, maximum]``; ``None`` only with ``allow_none``."""
    if value is None:
        if allow_none:
            return None
        raise _refuse(name, "needs a value")
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise _refuse(name, f"must be a whole number, got {_shown(value)}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise _refuse(name, f"must be at least {minimum}, got {_shown(number)}")
    if maximum is not None and number > maximum:
        raise _refuse(name, f"must be at most {maximum}, got {_shown(number)}")
    return number


@overload
def real(value: Any, name: str, *, minimum: float | None = ..., maximum: float | None = ...,
         strict_min: bool = ..., strict_max: bool = ...,
         allow_none: Literal[False] = ...) -> float: ...
@overload
def real(value: Any, name: str, *, minimum: float | None = ..., maximum: float | None = ...,
         strict_min: bool = ..., strict_max: bool = ..., allow_none: bool) -> float | None: ...
def real(value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None,
         strict_min: bool = False, strict_max: bool = False,
         allow_none: bool = False) -> float | None:
    """``value`` as a finite float64: an int or float (not ``True``/``False``, not text), within
    ``[minimum, maximum]`` (an end left out with ``strict_min``/``strict_max``); ``None`` only
    with ``allow_none``. A subnormal such as 4.9e-324 is a number; a domain that must stay away
    from 0 says so with its ``minimum``."""
    if value is None:
        if allow_none:
            return None
        raise _refuse(name, "needs a value")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _refuse(name, f"must be a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64
        number = math.nan
    if not math.isfinite(number):
        raise _refuse(name, f"must be a finite number, got {_shown(value)}")
    low = minimum is not None and (number <= minimum if strict_min else number < minimum)
    high = maximum is not None and (number >= maximum if strict_max else number > maximum)
    if (low or high) and minimum is not None and maximum is not None:
        span = (f"a number from {minimum:g} to {maximum:g}" if not (strict_min or strict_max)
                else f"in {'(' if strict_min else '['}{minimum:g}, {maximum:g}"
                     f"{')' if strict_max else ']'}")
        raise _refuse(name, f"must be {span}, got {number:g}")
    if low:
        raise _refuse(name, f"must be {'>' if strict_min else '>='} {minimum:g}, got {number:g}")
    if high:
        raise _refuse(name, f"must be {'<' if strict_max else '<='} {maximum:g}, got {number:g}")
    return number


__all__ = ["real", "whole"]
