"""The integrations' keyword for λ is ``lambda_``, as everywhere in the Python API; the old
``lam`` keeps working for one release, with a :class:`ctxleak.errors.CtxleakDeprecationWarning`
(the same rule as :mod:`ctxleak.api`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.mechanisms import Decoding
from ctxleak.run.params import rename_keywords

F = TypeVar("F", bound=Callable[..., Any])


def lam_renamed(where: str) -> Callable[[F], F]:
    """``func`` taking the deprecated ``lam=`` as ``lambda_=``, with a deprecation warning;
    both given is a ConfigError. ``where`` names the call in the warning."""
    def wrap(func: F) -> F:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **rename_keywords(kwargs, {"lam": ("lambda_", None)}, where))

        return inner  # type: ignore[return-value]

    return wrap


def cid_config(lambda_: float, **settings: Any) -> tuple[CID, Decoding]:
    """:func:`CIDConfig` with λ = ``lambda_``; its errors about λ name ``lambda_``."""
    try:
        return CIDConfig(lam=lambda_, **settings)
    except ConfigError as exc:
        if exc.param != "lam":
            raise
        raise ConfigError(str(exc).replace("lam", "lambda_", 1), param="lambda_") from None
