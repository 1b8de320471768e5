"""``ctxleak.dp``: theoretical privacy accounting of DP synthetic-text generation (paper 001,
App. C), no model needed. ``calibrate`` is Algorithm 3 (the temperature, clip or subset size that
meets each target ε); ``epsilon`` is Algorithm 2 (the ε of given parameters and the order α*).

Example: ``[c.temperature for c in ctxleak.dp.calibrate([1, 10])]`` gives Table 4's τ column.
"""

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
                 n_gen: int, max_tokens: int) -> None:
    """The mechanism's parameters in their meaningful ranges (δ in (0, 1), c and τ in
    ``PARAM_RANGE``, s from 1 to its top, N_gen and T_max whole numbers from 1 to ``COUNT_MAX``);
    errors name the parameter and its range."""
    if not 0 < delta < 1:
        raise ConfigError(f"delta must be in (0, 1), got {delta:g}", param="delta")
    low, high = PARAM_RANGE
    for name, value, lowest in (("clip", clip, low), ("temperature", temperature, low),
                                ("subset_size", subset_size, 1)):
        if not lowest <= value <= high:
            raise ConfigError(f"{name} must be a number from {lowest:g} to {high:g}, got "
                              f"{value:g}", param=name)
    for name, count in (("n_gen", n_gen), ("max_tokens", max_tokens)):
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


def calibrate(target_eps: Any = "0.5,1,5,10,20,50,100", delta: float = 1e-5, *,
              clip: float = 10.0, subset_size: int = 50, temperature: float = 2.0,
              n_gen: int = 50, max_tokens: int = 40, search: str = "temperature",
              orders: Any = "2-99") -> list[Any]:
    """Algorithm 3 for each target ε: the searched parameter (``temperature``, ``clip`` or
    ``subset-size``), the order α* and the ε reached, as
    :class:`ctxleak.methods.accounting.Calibration` objects (one per target)."""
    from ctxleak.methods.accounting import calibrate as calibrate_mechanism

    targets = positive_floats(target_eps, "target_eps")
    check_targets(targets)
    check_params(delta, clip, subset_size, temperature, n_gen, max_tokens)
    name = search_name(search)
    order_list = parse_orders(orders)
    out = []
    for target in targets:
        try:
            out.append(calibrate_mechanism(target, delta, clip=clip, subset_size=subset_size,
                                           temperature=temperature, n_gen=n_gen,
                                           max_tokens=max_tokens, search=name,
                                           orders=order_list))
        except ValueError as exc:
            raise ConfigError(str(exc), param="target_eps") from None
    return out


def epsilon(clip: float = 10.0, subset_size: int = 50, temperature: float = 2.0,
            n_gen: int = 50, max_tokens: int = 40, delta: float = 1e-5,
            orders: Any = "2-99") -> dict[str, Any]:
    """Algorithm 2: the theoretical ε (at δ) of ``n_gen`` sequences of ``max_tokens`` tokens
    and its optimal order α*, as a dict of the parameters with ``eps`` and ``alpha``."""
    from ctxleak.methods.accounting import theoretical_epsilon

    check_params(delta, clip, subset_size, temperature, n_gen, max_tokens)
    eps, alpha = theoretical_epsilon(clip, subset_size, temperature, n_gen, max_tokens, delta,
                                     orders=parse_orders(orders))
    return {"clip": clip, "subset_size": subset_size, "temperature": temperature,
            "n_gen": n_gen, "max_tokens": max_tokens, "delta": delta,
            "alpha": int(alpha) if float(alpha).is_integer() else alpha, "eps": eps}


__all__: Sequence[str] = ["EPS_MAX", "calibrate", "check_params", "check_targets", "epsilon",
                          "parse_orders", "positive_floats"]
