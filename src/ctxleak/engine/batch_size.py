"""The ``batch_size`` option, read and checked without importing torch, so that the run layer's
checks (:mod:`ctxleak.run.validate`) can refuse a bad value before any model is loaded and the
engine's planner (:mod:`ctxleak.engine.batching`) reads it the same way."""

from __future__ import annotations

from ctxleak.errors import ConfigError


def check_batch_size(value: str | int | None, name: str = "batch_size") -> int | None:
    """``'auto'`` (or None) -> None; otherwise a positive integer written as one (``1.5``,
    ``nan``, ``inf`` and ``abc`` are refused). ``name``: the keyword named in the error, or a
    CLI flag (``--batch-size``), which the error then does not give as its parameter."""
    param = None if name.startswith("-") else name
    if value is None or value == "auto":
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be 'auto' or a positive integer, not '{value}'",
                          param=param)
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip()
        if not text.lstrip("+-").isdigit():
            raise ConfigError(f"{name} must be 'auto' or a positive integer, not '{value}'",
                              param=param)
        n = int(text)
    if n < 1:
        raise ConfigError(f"{name} must be at least 1, got {n}", param=param)
    return n
