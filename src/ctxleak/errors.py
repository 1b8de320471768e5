"""Errors a user can fix. The CLI prints these without a traceback."""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from types import FrameType


class CtxleakError(Exception):
    """A mistake in the user's input, flags or environment, with a message that says how to fix it.

    ``param``: the keyword parameter the message is about (named in it); ``also``: other
    keywords the message suggests, written ``name=value`` in it. The CLI shows flags instead
    (:func:`flag_message`)."""

    param: str | None = None
    also: tuple[str, ...] = ()


class InputError(CtxleakError):
    """Bad input data: names the file, the line (1-based) and the field when they are known."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None, param: str | None = None,
                 also: tuple[str, ...] = ()) -> None:
        self.file, self.line, self.field = file, line, field
        self.reason = message  # the message without where
        self.param, self.also = param, tuple(also)
        where = []
        if file is not None:
            where.append(str(file) + (f":{line}" if line is not None else ""))
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__((": ".join([", ".join(where), message])) if where else message)


class EditedRunError(InputError):
    """A run folder's file changed after ctxleak wrote it: its SHA-256 is not the one the
    folder's manifest recorded, or a number breaks what its method guarantees (a response
    influence that is not the sum of its token influences, a δ above 1). Names the file, the
    line and, where a cross-check pins it down, the field."""


class ConfigError(CtxleakError):
    """A bad option value, or a resume whose config differs from the stored one.

    Library code names the Python parameter (``param="lam"``, message ``"lam must be >= 0"``);
    the CLI rewrites that name into its flag (``--lambda``) with :func:`flag_message`.
    """

    def __init__(self, message: str, *, param: str | None = None,
                 also: tuple[str, ...] = ()) -> None:
        self.param, self.also = param, tuple(also)
        super().__init__(message)


def flag_message(exc: CtxleakError | CtxleakWarning, flags: dict[str, str]) -> str:
    """``exc``'s message with parameter names replaced by the CLI flags in ``flags``
    (``{"lam": "--lambda"}``): the first mention of ``exc.param`` and every ``name=`` of
    ``exc.param`` and ``exc.also`` (``label_scoring='full'`` -> ``--label-scoring='full'``;
    a switch's ``resume=True`` -> ``--resume``). Unchanged when it names no parameter or the
    flag is unknown."""
    message = str(exc)
    param = getattr(exc, "param", None)
    if param and param in flags:
        message = re.sub(rf"(?<![\w-]){re.escape(param)}(?![\w-])", flags[param], message,
                         count=1)
    for name in (param, *getattr(exc, "also", ())):
        if name and name in flags:
            message = re.sub(rf"(?<![\w-]){re.escape(name)}=True(?![\w-])", flags[name],
                             message)
            message = re.sub(rf"(?<![\w-]){re.escape(name)}=", flags[name] + "=", message)
    return message


class OutputError(CtxleakError, OSError):
    """The operating system refused to create or write a run's files (a full disk, a read-only
    folder, ``output`` naming a file). Also an :class:`OSError` with the original ``errno`` and
    ``filename``, so code that catches OS errors still does; the message names the path and
    what to do, and ``param`` is ``"output"``."""

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None,
                 param: str | None = "output", also: tuple[str, ...] = ()) -> None:
        if errno is not None:
            OSError.__init__(self, errno, message, path)
        else:
            OSError.__init__(self, message)
        self.message, self.param, self.also = message, param, tuple(also)

    def __str__(self) -> str:
        return self.message


class CtxleakWarning(UserWarning):
    """A ctxleak warning (a context cut to the model's window, an n-gram clipped to the
    context): the run goes on. ``param`` is the keyword the message names, if any; the CLI
    prints ``warning: ...`` with the flag instead."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class CtxleakDeprecationWarning(CtxleakWarning, DeprecationWarning):
    """An old flag or keyword that still works for one release (``--max-tokens`` for
    ``--max-new-tokens``, ``lam=`` for ``lambda_=``): the message names the new spelling."""


def warn(message: str, param: str | None = None,
         category: type[CtxleakWarning] = CtxleakWarning) -> None:
    """Issue a :class:`CtxleakWarning` (or ``category``) attributed to the first caller outside
    the ctxleak package (the user's own line), never to an internal source line."""
    package = str(Path(__file__).resolve().parent) + os.sep
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
            package):
        level, frame = level + 1, frame.f_back
    warnings.warn(category(message, param), stacklevel=level)
