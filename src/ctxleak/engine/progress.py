"""Tokens through the model, counted as they go: the engine's forward passes report how many
token positions they computed to whoever listens (the run's progress bar), so progress moves
with the work inside a batch instead of jumping when the batch's examples finish.

The listener is a context variable set around a run (:func:`counting`); with none set,
:func:`count_tokens` does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SINK: ContextVar[Callable[[int], None] | None] = ContextVar("ctxleak_token_sink", default=None)


def count_tokens(n: int) -> None:
    """Report ``n`` token positions computed by one forward pass."""
    sink = _SINK.get()
    if sink is not None and n > 0:
        sink(n)


@contextmanager
def counting(sink: Callable[[int], None]) -> Iterator[None]:
    """Within the block, :func:`count_tokens` hands its counts to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
