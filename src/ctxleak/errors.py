"""Errors a user can fix. The CLI prints these without a traceback (SPEC §9)."""

from __future__ import annotations


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
        self.param, self.also = param, tuple(also)
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

    def __init__(self, message: str, *, param: str | None = None,
                 also: tuple[str, ...] = ()) -> None:
        self.param, self.also = param, tuple(also)
        super().__init__(message)


def flag_message(exc: CtxleakError, flags: dict[str, str]) -> str:
    """``exc``'s message with parameter names replaced by the CLI flags in ``flags``
    (``{"lam": "--lambda"}``): the first mention of ``exc.param`` and every ``name=`` of
    ``exc.param`` and ``exc.also`` (``label_scoring='full'`` -> ``--label-scoring='full'``;
    a switch's ``resume=True`` -> ``--resume``). Unchanged when it names no parameter or the
    flag is unknown."""
    import re

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
