"""The parameters of the DP synthetic-text accounting (Evaluating Privacy Leakage From In-Context
Learning, App. C), read and checked: comma-separated lists and order ranges as the CLI and the
Python API take them, and the ranges in which the accountant's numbers mean something. Errors are
:class:`~ctxleak.errors.ConfigError` naming the parameter. Used by :mod:`ctxleak.dp` (the public
face) and the audit Method."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from ctxleak.errors import ConfigError

#: The largest meaningful ε: (ε, δ)-DP bounds a probability by e^ε·p + δ, and beyond
#: ln(largest float64) ≈ 709.78 e^ε is not even a number (the guarantee says nothing long before).
EPS_MAX = math.log(sys.float_info.max)
#: The range of the clip bound c and the temperature τ (and the top of the subset size s):
#: far wider than any useful setting (logits are tens, τ near 1), and narrow enough that the
#: per-token sensitivity c/(sτ) and ε over a billion tokens stay finite float64 numbers.
PARAM_RANGE = (1e-100, 1e100)
#: The largest number of sequences N_gen and of tokens per sequence T_max.
COUNT_MAX = 10**9

#: ``search`` values: the CLI's spelling -> the accounting's parameter name.
SEARCH = {"temperature": "temperature", "clip": "clip", "subset-size": "subset_size",
          "subset_size": "subset_size"}


def positive_floats(value: Any, param: str) -> list[float]:
    """``"1,5,10"``, a number or a list -> positive finite floats; errors name ``param``."""
    parts = list(value) if isinstance(value, (list, tuple)) else str(value).split(",")
    values = []
    for part in parts:
        try:
            v = float(str(part).strip())
        except ValueError:
            raise ConfigError(f"{param}: cannot read {str(part).strip()!r} as a number in "
                              f"{value!r} (use a comma-separated list such as 1,5,10)",
                              param=param) from None
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(f"{param}: values must be positive numbers, got "
                              f"{str(part).strip()!r}", param=param)
        values.append(v)
    return values


def parse_orders(value: Any) -> list[float]:
    """``"2-99"`` -> integers 2..99; parts separated by commas (or a list of numbers); every
    order must exceed 1."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    orders: list[float] = []
    for part in str(value).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                orders.extend(float(x) for x in range(a, b + 1))
            else:
                orders.append(float(part))
        except ValueError:
            raise ConfigError(f"orders: cannot read {part!r} in {value!r}; use integer ranges "
                              "LO-HI and numbers, e.g. 2-99 or 1.5,2,4", param="orders") from None
    if not orders or any(not (o > 1 and math.isfinite(o)) for o in orders):
        raise ConfigError(f"orders: every Rényi order must be a finite number > 1, got {value!r}",
                          param="orders")
    return orders


def check_params(delta: float, clip: float, subset_size: float, temperature: float,
                 n_gen: int, max_tokens: int,
                 count_names: tuple[str, str] = ("n_gen", "max_tokens")) -> None:
    """The mechanism's parameters in their meaningful ranges (δ in (0, 1), c and τ in
    ``PARAM_RANGE``, s from 1 to its top, N_gen and T_max whole numbers from 1 to ``COUNT_MAX``);
    errors name the parameter (N_gen and T_max under ``count_names``) and its range."""
    if not 0 < delta < 1:
        raise ConfigError(f"delta must be in (0, 1), got {delta:g}", param="delta")
    low, high = PARAM_RANGE
    for name, value, lowest in (("clip", clip, low), ("temperature", temperature, low),
                                ("subset_size", subset_size, 1)):
        if not lowest <= value <= high:
            raise ConfigError(f"{name} must be a number from {lowest:g} to {high:g}, got "
                              f"{value:g}", param=name)
    for name, count in zip(count_names, (n_gen, max_tokens)):
        if not (1 <= count <= COUNT_MAX and float(count).is_integer()):
            raise ConfigError(f"{name} must be a whole number from 1 to {COUNT_MAX:.0e}, got "
                              f"{count:g}", param=name)


def check_targets(targets: Sequence[float], param: str = "target_eps") -> None:
    """Each target ε at most ``EPS_MAX`` (the error says why); the lower end, the ε of no
    privacy loss at the given δ, is checked by Algorithm 3 itself."""
    for target in targets:
        if not target <= EPS_MAX:
            raise ConfigError(f"{param} must be at most {EPS_MAX:.2f} (above it e^ε overflows "
                              f"float64 and the (ε, δ) guarantee bounds nothing), got "
                              f"{target:g}", param=param)


def search_name(search: str) -> str:
    if search not in SEARCH:
        raise ConfigError(f"search must be one of temperature, clip, subset-size, got "
                          f"{search!r}", param="search")
    return SEARCH[search]
