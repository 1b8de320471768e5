"""What a command prints: its Result's console table, through ``result.show()``, as
tab-separated values under ``ctxleak --plain``.

The flag is read once by :func:`ctxleak.cli.app.main` and holds for that one call (a context
variable, set and reset around the command), so the report layer takes ``plain`` as an argument
and nothing stays switched after the command returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_PLAIN_OUTPUT: ContextVar[bool] = ContextVar("ctxleak_plain_output", default=False)


@contextmanager
def plain_tables(on: bool) -> Iterator[None]:
    """Within the block, commands print tables as TSV when ``on`` (``ctxleak --plain``)."""
    token = _PLAIN_OUTPUT.set(bool(on))
    try:
        yield
    finally:
        _PLAIN_OUTPUT.reset(token)


def plain_output() -> bool:
    """Whether the running command was given ``ctxleak --plain``."""
    return _PLAIN_OUTPUT.get()


def show(result: Any) -> None:
    """Print ``result`` (None on the other processes of a data-parallel run: nothing)."""
    if result is not None:
        result.show(plain=plain_output())
