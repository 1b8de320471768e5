"""Checks of run parameters, made before any model is loaded.

Each function names the parameter it checks with ``name`` (the library's keyword; the CLI passes
its flag, e.g. ``--limit``) and raises :class:`ctxleak.errors.ConfigError` with one line that
says what is allowed. They import nothing heavy, so a command can call them all first.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from ctxleak.domains import real, whole
from ctxleak.engine.batch_size import check_batch_size
from ctxleak.errors import ConfigError


def _named(name: str, message: str) -> ConfigError:
    """The error, naming ``name`` as its parameter when it is a keyword (``lam``, not a flag
    ``--lambda``), so that the CLI can show its flag instead."""
    return ConfigError(message, param=None if name.startswith("-") else name)


def check_limit(limit: int | None, name: str = "limit", minimum: int = 1) -> int | None:
    """``None`` (all examples) or an integer of at least ``minimum``
    (:func:`ctxleak.domains.whole`: not ``True``, not ``12.5``)."""
    return whole(limit, name, minimum=minimum, allow_none=True)


def check_number(value: float | None, name: str, *, minimum: float | None = None,
                 maximum: float | None = None, strict_min: bool = False,
                 allow_none: bool = False) -> float | None:
    """A finite number within ``[minimum, maximum]`` (``(minimum, ...`` with ``strict_min``):
    :func:`ctxleak.domains.real` (not ``True``, not NaN or ±inf, not an integer beyond
    float64)."""
    return real(value, name, minimum=minimum, maximum=maximum, strict_min=strict_min,
                allow_none=allow_none)


def check_nonempty(values: Sequence[Any], name: str, example: str = "") -> Sequence[Any]:
    """A list parameter that must hold at least one value (``--lambda=`` is an error)."""
    if len(values) == 0:
        hint = f", e.g. {example}" if example else ""
        raise _named(name, f"{name} needs at least one value{hint}")
    return values


def check_unique(values: Sequence[Any], name: str) -> Sequence[Any]:
    """A list parameter without repeats (``--lambda 1,1`` would run one setting twice under one
    sample id)."""
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise _named(name, f"{name} lists {v:g} twice" if isinstance(v, float)
                              else f"{name} lists {v} twice")
        seen.add(v)
    return values


def check_template(template: str | None, name: str, allowed: Sequence[str],
                   required: Sequence[str] = ()) -> str | None:
    """A ``str.format`` template whose slots are among ``allowed`` and include ``required``
    (``{context} {bogus}`` or an unclosed brace is refused)."""
    if template is None:
        return None
    try:
        slots = [f for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise _named(name, f"{name} is not a valid template ({exc})") from None
    unknown = sorted({s for s in slots if s not in allowed})
    if unknown:
        raise _named(name, f"{name} has unknown slot(s) {', '.join('{' + s + '}' for s in unknown)}"
                          f"; allowed: {', '.join('{' + a + '}' for a in allowed)}")
    missing = [r for r in required if r not in slots]
    if missing:
        raise _named(name, f"{name} must contain {', '.join('{' + m + '}' for m in missing)}")
    return template


def check_common(*, limit: int | None, batch_size: str | int | None,
                 threads: int | None) -> None:
    """The common run options of every model command (``limit``, ``batch_size``, ``threads``;
    the CLI shows them as ``--limit``, ``--batch-size``, ``--threads``)."""
    check_limit(limit, "limit")
    check_batch_size(batch_size, "batch_size")
    if threads is not None:
        check_limit(threads, "threads")
