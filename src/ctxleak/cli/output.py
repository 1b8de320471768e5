"""What a command prints: its Result's console table, through ``result.show()``, as
tab-separated values under ``ctxleak --plain`` (the flag rides in the click context's ``obj``,
set by :func:`ctxleak.cli.app.main`)."""

from __future__ import annotations

from typing import Any

import click


def plain_output() -> bool:
    """Whether this command was run with ``ctxleak --plain``."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return bool(isinstance(obj, dict) and obj.get("plain"))


def show(result: Any) -> None:
    """Print ``result`` (None on the other processes of a data-parallel run: nothing)."""
    if result is not None:
        result.show(plain=plain_output())
