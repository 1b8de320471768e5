"""``ctxleak.dp``: theoretical privacy accounting of DP synthetic-text generation (Evaluating
Privacy Leakage From In-Context Learning, App. C), no model needed. ``calibrate`` is Algorithm 3
(the temperature, clip or subset size that meets each target ε); ``epsilon`` is Algorithm 2 (the ε
of given parameters and the order α*).

Example: ``[c.temperature for c in ctxleak.dp.calibrate([1, 10])]`` gives Table 4's τ column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.mitigations.accounting import calibrate as calibrate_mechanism
from ctxleak.mitigations.accounting import theoretical_epsilon
from ctxleak.mitigations.accounting_params import (
    EPS_MAX,
    check_params,
    check_targets,
    parse_orders,
    positive_floats,
    search_name,
)
from ctxleak.run.params import Renamed, rename_keywords

#: Keywords renamed to match the CLI's flags (``--sequences``, ``--max-new-tokens``): the old
#: ones keep working for one release, with a deprecation warning.
RENAMED: dict[str, Renamed] = {"n_gen": ("sequences", None),
                               "max_tokens": ("max_new_tokens", None)}
COUNT_NAMES = ("sequences", "max_new_tokens")


def _renamed(where: str, given: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` updated by the old keywords in ``given`` (under their new names); any other
    keyword is refused as Python would."""
    unknown = set(given) - set(RENAMED)
    if unknown:
        raise TypeError(f"{where} got an unexpected keyword argument '{sorted(unknown)[0]}'")
    return {**values, **rename_keywords(given, RENAMED, where)}


def calibrate(target_eps: Any = "0.5,1,5,10,20,50,100", delta: float = 1e-5, *,
              clip: float = 10.0, subset_size: int = 50, temperature: float = 2.0,
              sequences: int = 50, max_new_tokens: int = 40, search: str = "temperature",
              orders: Any = "2-99", **deprecated: Any) -> list[Any]:
    """Algorithm 3 for each target ε: the searched parameter (``temperature``, ``clip`` or
    ``subset-size``), the order α* and the ε reached, as
    :class:`ctxleak.mitigations.accounting.Calibration` objects (one per target). ``sequences`` is
    the paper's N_gen, ``max_new_tokens`` its T_max (``n_gen`` and ``max_tokens`` before,
    deprecated)."""
    counts = _renamed("calibrate()", deprecated, {"sequences": sequences,
                                                  "max_new_tokens": max_new_tokens})
    n_gen, max_tokens = counts["sequences"], counts["max_new_tokens"]
    targets = positive_floats(target_eps, "target_eps")
    check_targets(targets)
    check_params(delta, clip, subset_size, temperature, n_gen, max_tokens, COUNT_NAMES)
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
            sequences: int = 50, max_new_tokens: int = 40, delta: float = 1e-5,
            orders: Any = "2-99", **deprecated: Any) -> dict[str, Any]:
    """Algorithm 2: the theoretical ε (at δ) of ``sequences`` sequences (N_gen) of
    ``max_new_tokens`` tokens (T_max) and its optimal order α*, as a dict of the parameters
    with ``eps`` and ``alpha`` (``n_gen`` and ``max_tokens`` before, deprecated)."""
    counts = _renamed("epsilon()", deprecated, {"sequences": sequences,
                                                "max_new_tokens": max_new_tokens})
    n_gen, max_tokens = counts["sequences"], counts["max_new_tokens"]
    check_params(delta, clip, subset_size, temperature, n_gen, max_tokens, COUNT_NAMES)
    eps, alpha = theoretical_epsilon(clip, subset_size, temperature, n_gen, max_tokens, delta,
                                     orders=parse_orders(orders))
    return {"clip": clip, "subset_size": subset_size, "temperature": temperature,
            "sequences": n_gen, "max_new_tokens": max_tokens, "delta": delta,
            "alpha": int(alpha) if float(alpha).is_integer() else alpha, "eps": eps}


__all__: Sequence[str] = ["EPS_MAX", "calibrate", "check_params", "check_targets", "epsilon",
                          "parse_orders", "positive_floats"]
