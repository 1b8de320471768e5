"""The options every method run shares (SPEC §1): model, device, dtype, batch size, limit, seed,
run directory and resume. The CLI's common flags and the keywords of the Python API
(:mod:`ctxleak.api`) are these, under the same names."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

from ctxleak.errors import ConfigError


@dataclass(frozen=True)
class RunOptions:
    """What a run needs besides its method: stored in ``config.json`` under these names."""

    model: str = "default"
    device: str = "auto"
    dtype: str = "auto"
    batch_size: str = "auto"
    batch_invariant: bool = True
    limit: int | None = None
    seed: int = 0
    output: str | None = None
    resume: bool = False
    chat_template: str = "auto"
    trust_remote_code: bool = False
    device_map: Optional[str] = None
    threads: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def split(cls, options: dict[str, Any]) -> tuple[RunOptions, dict[str, Any]]:
        """(the run options among ``options``, the rest: the method's own keywords)."""
        names = set(cls.names())
        common = cls(**{k: v for k, v in options.items() if k in names})
        return common, {k: v for k, v in options.items() if k not in names}

    def check(self) -> RunOptions:
        """Errors name the parameter (the CLI maps it to its flag)."""
        from ctxleak.run.validate import check_common

        check_common(limit=self.limit, batch_size=self.batch_size, threads=self.threads)
        if not isinstance(self.batch_invariant, bool):
            raise ConfigError(f"batch_invariant must be True or False, not "
                              f"{self.batch_invariant!r}", param="batch_invariant")
        return self


def float_list(value: Any, param: str) -> list[float]:
    """A number, a list of numbers or a comma list (``"0.5,1,1.5"``) as floats; errors name
    ``param``."""
    if value is None:
        return []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    try:
        if isinstance(value, (list, tuple)):
            values = [float(v) for v in value]
        else:
            values = [float(v) for v in str(value).split(",") if v.strip()]
    except (TypeError, ValueError):
        raise ConfigError(f"{param} must be a number or a comma list of numbers, not '{value}'",
                          param=param) from None
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"{param} must be finite numbers, not {bad[0]}", param=param)
    return values


def int_list(value: Any, param: str) -> list[int]:
    """An integer, a list of integers or a comma list (``"1,2,4"``); errors name ``param``."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    try:
        if isinstance(value, (list, tuple)):
            out = [int(v) for v in value]
            if any(float(v) != i for v, i in zip(value, out)):
                raise ValueError
            return out
        return [int(v) for v in str(value).split(",") if v.strip()]
    except (TypeError, ValueError):
        raise ConfigError(f"{param} must be an integer or a comma list of integers, not "
                          f"'{value}'", param=param) from None
