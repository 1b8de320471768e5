"""A target's ``os._exit`` tested in the test process itself: no child interpreter (which would
import torch again, seconds each) and still a test runner that survives whatever happens."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


class Escaped(BaseException):  # noqa: N818 - what happened, not an error category
    """``os._exit`` was really called: without the trap the test process would have ended."""


@contextmanager
def exits_trapped() -> Iterator[None]:
    """While inside: ``os._exit`` and ctxleak's own copy of it (``_REAL_EXIT``, what its guard
    restores and what a forked child calls) raise :class:`Escaped` instead of ending the
    process. A guard that is not in place, or that calls the real exit, fails the test with
    ``Escaped`` where a child process would have died; the guard's own ``ProcessExit`` is
    untouched. Everything is put back on the way out, whatever the guard left."""
    import ctxleak.targets.base as base

    real, saved = os._exit, base._REAL_EXIT

    def escaped(status: int) -> None:
        raise Escaped(status)

    os._exit = escaped  # type: ignore[assignment]
    base._REAL_EXIT = escaped  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit, base._REAL_EXIT = real, saved


def exit_restored() -> bool:
    """Whether ``os._exit`` is what ctxleak's guard puts back once the target's call ended (under
    :func:`exits_trapped`: the trap, ctxleak's copy of the real exit), not the guard's own."""
    import ctxleak.targets.base as base

    return os._exit is base._REAL_EXIT
