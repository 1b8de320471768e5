"""How long a served model's requests may take and how often a failed one is sent again
(``--request-timeout SECONDS``, ``--retries N``), checked before anything is contacted (no
heavy imports here: the CLI checks them at start). They change how the client waits, never a
number it measures."""

from __future__ import annotations

import math
from typing import Any

from ctxleak.errors import ConfigError


def check_request_timeout(value: Any) -> float | None:
    """``None`` (the client's default, 600 s) or a finite number of seconds > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"request_timeout must be a number of seconds > 0, not {value!r}",
                          param="request_timeout")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"request_timeout must be a finite number of seconds > 0 (the "
                          f"longest one request to the server may take), not {value!r}",
                          param="request_timeout")
    return float(value)


def check_retries(value: Any) -> int | None:
    """``None`` (the client's default, 3 retries) or an integer ≥ 0: how many times a request
    that failed for a transient reason is sent again (0: tried once)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"retries must be an integer ≥ 0 (times a failed request is sent "
                          f"again; 0: tried once), not {value!r}", param="retries")
    return value
