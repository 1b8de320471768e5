"""Options dataclasses: each method's parameters in one frozen dataclass that checks itself.

A field is declared with :func:`option` (its default and one line of documentation), and the
dataclass validates every field in ``__post_init__``, raising
:class:`ctxleak.errors.ConfigError` with ``param=`` set to the field's name, the way
:func:`ctxleak.mitigations.cid.CIDConfig` does. The same fields are the keyword
parameters of :mod:`ctxleak.api` (whose docstrings read :func:`option_docs`) and of the CLI's
commands; :func:`check_keywords` refuses an unknown keyword with a did-you-mean.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import field, fields
from typing import Any

from ctxleak.errors import ConfigError, CtxleakDeprecationWarning, warn

#: The metadata key holding an option's documentation.
DOC = "doc"


def option(default: Any, doc: str) -> Any:
    """A dataclass field with ``default`` and its documentation ``doc`` (one or two sentences,
    shown in the Python API's docstrings)."""
    return field(default=default, metadata={DOC: doc})


def option_docs(cls: type) -> dict[str, str]:
    """``{field name: documentation}`` of a dataclass declared with :func:`option`."""
    return {f.name: f.metadata.get(DOC, "") for f in fields(cls)}


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'lam'?)"`` for the closest of ``choices`` to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_keyword(name: str, choices: Iterable[str], where: str) -> ConfigError:
    """The error for a keyword ``name`` that ``where`` does not take, with a did-you-mean."""
    return ConfigError(f"{where} got an unknown keyword '{name}'{did_you_mean(name, choices)}")


def check_keywords(given: Iterable[str], choices: Iterable[str], where: str) -> None:
    """Refuse the first of ``given`` not among ``choices`` (:func:`unknown_keyword`)."""
    allowed = list(choices)
    for name in given:
        if name not in allowed:
            raise unknown_keyword(name, allowed, where)


#: A renamed keyword: (its new name, how an old value becomes the new one, or None to keep it).
Renamed = tuple[str, Any]


def rename_keywords(given: dict[str, Any], renamed: dict[str, Renamed],
                    where: str) -> dict[str, Any]:
    """``given`` with each old keyword of ``renamed`` moved to its new name, with a
    :class:`ctxleak.errors.CtxleakDeprecationWarning` naming both (old spellings keep working
    for one release); old and new given together is an error."""
    out = dict(given)
    for old, (new, convert) in renamed.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out:
            raise ConfigError(f"{where} got both '{old}' (deprecated) and '{new}': give only "
                              f"'{new}'", param=new)
        warn(f"{where}: '{old}' is deprecated and will be removed in the next release; use "
             f"'{new}'", category=CtxleakDeprecationWarning)
        value = convert(value) if convert is not None else value
        if value is not None:
            out[new] = value
    return out
