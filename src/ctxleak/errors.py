"""Errors a user can fix. The CLI prints these without a traceback (SPEC §9)."""

from __future__ import annotations


class CtxleakError(Exception):
    """A mistake in the user's input, flags or environment, with a message that says how to fix it."""


class InputError(CtxleakError):
    """Bad input data: names the file, the line (1-based) and the field when they are known."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field = file, line, field
        where = []
        if file is not None:
            where.append(str(file) + (f":{line}" if line is not None else ""))
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__((": ".join([", ".join(where), message])) if where else message)


class ConfigError(CtxleakError):
    """A bad option value, or a resume whose config differs from the stored one.

    Library code names the Python parameter (``param="lam"``, message ``"lam must be >= 0"``);
    the CLI rewrites that name into its flag (``--lambda``) with :func:`flag_message`.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


def flag_message(exc: CtxleakError, flags: dict[str, str]) -> str:
    """``exc``'s message with its parameter name replaced by the CLI flag in ``flags``
    (``{"lam": "--lambda"}``); unchanged when it names no parameter or the flag is unknown."""
    import re

    message = str(exc)
    param = getattr(exc, "param", None)
    if not param or param not in flags:
        return message
    return re.sub(rf"(?<![\w-]){re.escape(param)}(?![\w-])", flags[param], message, count=1)
