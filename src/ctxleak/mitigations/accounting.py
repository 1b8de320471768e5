"""Rényi-DP accounting for DP synthetic-text generation (Evaluating Privacy Leakage From In-Context
Learning, §5 and Appendix C).

Pure maths (numpy/scipy, no model, no torch). The API follows the event/accountant split of
Google's ``dp_accounting``: a frozen event says what one mechanism run costs as an RDP curve
``ε(α)``; an :class:`RDPAccountant` adds curves up over the orders (Theorem C.7) and converts the
total to ``(ε, δ)``-DP with Theorem C.8 minimised over the orders (Algorithm 2).

The mechanism audited is Algorithm 1 (Amin et al. 2024): clip each prompt's logits to
``[-c, c]``, average over ``s`` prompts, sample from ``softmax(z̄ / τ)``. With ``Δ = c / (sτ)`` one
token costs ``min(ρα, ε_EM(α))`` with ``ρ = Δ²/2`` (Theorems C.2-C.3, Eq. 8) and ``ε_EM`` the
exponential-mechanism bound of Theorem C.5 at ``ε = 2Δ`` (Theorem C.4); see :class:`DPTokenEvent`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
from scipy.special import logsumexp

#: Default RDP orders: the integers 2..99 (Algorithm 2's candidate set).
DEFAULT_ORDERS: tuple[int, ...] = tuple(range(2, 100))
#: Parameters Algorithm 3 can search over.
SEARCHABLE = ("temperature", "clip", "subset_size")


def _orders_array(orders: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(orders), dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("orders must be a non-empty list of numbers")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1):
        raise ValueError(f"RDP orders must be finite and > 1, got {arr.tolist()}")
    return arr


def _finite(x: float) -> bool:
    """Whether ``x`` is a finite float64 number (an int too large for a float is not)."""
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _log_cosh(x: np.ndarray) -> np.ndarray:
    """``log cosh x`` without overflow, and accurate near 0 (``cosh x = 1 + 2 sinh²(x/2)``)."""
    ax = np.abs(np.asarray(x, dtype=np.float64))
    small = np.minimum(ax, 1.0)
    return np.where(ax < 1.0, np.log1p(2.0 * np.sinh(small / 2) ** 2),
                    ax + np.log1p(np.exp(-2.0 * ax)) - math.log(2.0))


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------


class PrivacyEvent:
    """Base class: one mechanism run, described by its RDP curve."""

    def rdp(self, orders: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        """RDP ``ε(α)`` at each order (float64 array, same shape as ``orders``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ZCDPEvent(PrivacyEvent):
    """A ``ρ``-zCDP mechanism: ``(α, ρα)``-RDP for every ``α > 1`` (Theorem C.3)."""

    rho: float

    def __post_init__(self) -> None:
        if not self.rho >= 0:
            raise ValueError(f"rho must be >= 0, got {self.rho}")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # an infinite ρ (no guarantee) stays infinite
            return cast("np.ndarray", np.float64(self.rho) * np.asarray(orders, dtype=np.float64))


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """Gaussian mechanism, sensitivity 1, noise ``σ``: ``ρ = 1/(2σ²)``-zCDP (Bun & Steinke 2016)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise ValueError(f"noise_multiplier must be a finite number > 0, got "
                             f"{self.noise_multiplier}")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", divide="ignore"):  # tiny σ: ρ = inf, no guarantee
            rho = 0.5 / np.float64(self.noise_multiplier) ** 2
        return ZCDPEvent(float(rho)).rdp(orders)


@dataclass(frozen=True)
class ExponentialMechanismEvent(PrivacyEvent):
    """An ``ε``-DP exponential mechanism; RDP bound of Theorem C.5 (Theorem 8 of [32]).

    ``ε_EM(α) = min(α ε²/2, log((sinh(αε) − sinh((α−1)ε)) / sinh ε) / (α−1))``. The sinh ratio
    equals ``cosh((2α−1)ε/2) / cosh(ε/2)``, evaluated here in log space so large ``αε`` cannot
    overflow. The bound never exceeds ``ε`` (the pure-DP guarantee).
    """

    epsilon: float

    def __post_init__(self) -> None:
        if not self.epsilon >= 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        a = np.asarray(orders, dtype=np.float64)
        eps = np.float64(self.epsilon)
        if math.isinf(eps):  # no pure-DP guarantee: no RDP bound either
            return np.full_like(a, np.inf)
        with np.errstate(over="ignore"):  # huge αε: both terms overflow to inf, the min is ε
            sinh_term = (_log_cosh((2 * a - 1) * eps / 2) - _log_cosh(eps / 2)) / (a - 1)
            zcdp_term = a * eps**2 / 2
        # clipping to [0, ε] (D_α ≤ D_∞ ≤ ε) only removes rounding
        return cast("np.ndarray", np.clip(np.minimum(zcdp_term, sinh_term), 0.0, eps))


@dataclass(frozen=True)
class PureDPEvent(ExponentialMechanismEvent):
    """Any ``ε``-DP mechanism (a bounded-CID token, Thm B.1 of the context-influence paper):
    the same curve, which bounds every ε-DP mechanism ("Concentrated Differential Privacy:
    Simplifications, Extensions, and Lower Bounds", Bun and Steinke, Prop. 3.3: ε²/2-zCDP; the
    sinh form is the worst case, randomized response)."""


@dataclass(frozen=True)
class MinEvent(PrivacyEvent):
    """Several RDP bounds that each hold for the *same* mechanism: their pointwise minimum."""

    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        if not self.events:
            raise ValueError("MinEvent needs at least one event")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return cast("np.ndarray", np.min([e.rdp(orders) for e in self.events], axis=0))


@dataclass(frozen=True)
class DPTokenEvent(PrivacyEvent):
    """One token of Algorithm 1 with clip ``c``, ``s`` prompts and temperature ``τ``.

    ``Δ = c/(sτ)`` (Lemma 3 of Amin et al.); per-token RDP is the minimum of the zCDP bound
    ``αΔ²/2`` (Theorem C.2, Eq. 8) and the exponential-mechanism bound of Theorem C.5 at
    ``ε_EM = 2Δ`` (Theorem C.4): the displayed bound of App. C.3.1.
    """

    clip: float
    subset_size: float
    temperature: float

    def __post_init__(self) -> None:
        for name in ("clip", "subset_size", "temperature"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number, got {value}")

        if not math.isfinite(self.sensitivity):
            raise ValueError(f"the sensitivity c/(sτ) = {self.clip}/({self.subset_size}·"
                             f"{self.temperature}) is not a finite float64 number: raise "
                             "subset_size or temperature, or lower clip")

    @property
    def sensitivity(self) -> float:
        """``Δ = c / (sτ)``."""
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            return float(np.float64(self.clip) / (np.float64(self.subset_size)
                                                  * np.float64(self.temperature)))

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        delta = np.float64(self.sensitivity)
        with np.errstate(over="ignore", under="ignore"):  # Δ² beyond float64: ρ = inf
            rho = float(delta**2 / 2)
        return MinEvent((ZCDPEvent(rho), ExponentialMechanismEvent(float(2 * delta)))).rdp(orders)


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """``count`` adaptive runs of ``event``: RDP adds up (Theorem C.7)."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not (self.count >= 0 and _finite(self.count)):
            shown = self.count if _finite(self.count) else "a number beyond float64"
            raise ValueError(f"count must be a finite number >= 0, got {shown}")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # a sum beyond float64 is inf: no guarantee
            return float(self.count) * self.event.rdp(orders)


# ---------------------------------------------------------------------------------------------
# Accountant and conversions
# ---------------------------------------------------------------------------------------------


def rdp_budget(eps: float, delta: float, order: float) -> float:
    """The Rényi divergence at ``order`` that Theorem C.8 converts to exactly ``(eps, delta)``:
    ``eps − log((α−1)/α) + (log δ + log α)/(α−1)``, floored at 0 (the Rényi budget of a
    privacy filter at a fixed order: "Individual Privacy Accounting via a Rényi Filter",
    Feldman and Zrnic)."""
    if not 0 < delta < 1 or not order > 1:
        raise ValueError(f"need delta in (0, 1) and order > 1, got {delta}, {order}")
    a = float(order)
    return max(0.0, eps - math.log1p(-1.0 / a) + (math.log(delta) + math.log(a)) / (a - 1))


def rdp_to_approx_dp(orders: Iterable[float], rdp: Sequence[float] | np.ndarray,
                     delta: float) -> tuple[float, float]:
    """Algorithm 2 (RDP_TO_APPROXDP): the best ``(ε*, α*)`` over the orders.

    Theorem C.8 (Balle et al. 2020): ``ε = ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1)``.
    Ties go to the first order; ``ε`` is floored at 0 (as ``dp_accounting`` does).
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    a = _orders_array(orders)
    r = np.asarray(rdp, dtype=np.float64)
    if r.shape != a.shape:
        raise ValueError("orders and rdp must have the same length")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError(f"rdp must be numbers >= 0 (inf: no guarantee), got {r.tolist()}")
    eps = r + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


class RDPAccountant:
    """Adds RDP curves over a fixed grid of orders and converts to ``(ε, δ)``-DP."""

    def __init__(self, orders: Iterable[float] = DEFAULT_ORDERS) -> None:
        self.orders = _orders_array(orders)
        self._rdp = np.zeros_like(self.orders)

    def compose(self, event: PrivacyEvent, count: int = 1) -> RDPAccountant:
        """Add ``count`` runs of ``event`` (Theorem C.7). Returns ``self`` for chaining."""
        self._rdp = self._rdp + ComposedEvent(event, count).rdp(self.orders)
        return self

    def get_rdp(self) -> np.ndarray:
        """Total RDP at each order (a copy)."""
        return cast("np.ndarray", self._rdp.copy())

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """``(ε*, α*)`` by Algorithm 2 / Theorem C.8."""
        return rdp_to_approx_dp(self.orders, self._rdp, delta)

    def get_epsilon(self, delta: float) -> float:
        """``ε*`` by Algorithm 2 / Theorem C.8."""
        return self.get_epsilon_and_order(delta)[0]


def bounded_from_unbounded(eps: float) -> float:
    """Theorem C.9: ε-DP under add/remove adjacency is 2ε-DP under change-one adjacency."""
    return 2.0 * eps


def unbounded_from_bounded(eps: float) -> float:
    """Theorem C.9: ε-DP under change-one adjacency is ε/2-DP under add/remove adjacency."""
    return eps / 2.0


def empirical_epsilon(total_rdp: float, alpha: float, delta: float) -> float:
    """App. C.3.3: ε_empirical = 2 · (Σ_t ε_A^(t)(D; α*) converted by Theorem C.8 at α*).

    ``total_rdp`` is the data-dependent RDP summed over all generated tokens (remove-one
    neighbours, unbounded adjacency); the factor 2 is Theorem C.9.
    """
    return bounded_from_unbounded(rdp_to_approx_dp([alpha], [total_rdp], delta)[0])


# ---------------------------------------------------------------------------------------------
# Rényi divergence
# ---------------------------------------------------------------------------------------------


# Orders this close to 1 use the KL limit: (α − 1) in the denominator cancels catastrophically.
NEAR_ONE = 1e-6


def _renyi(lp: np.ndarray, lq: np.ndarray, alpha: float) -> np.ndarray:
    lp, lq = np.broadcast_arrays(lp, lq)
    support = lp > -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        if abs(alpha - 1) < NEAR_ONE:  # KL divergence (the limit; avoids 0/0 cancellation)
            d = np.sum(np.where(support, np.exp(lp) * (lp - lq), 0.0), axis=-1)
        elif math.isinf(alpha):  # max log ratio over the support of P
            d = np.max(np.where(support, lp - lq, -np.inf), axis=-1)
        else:
            terms = np.where(support, alpha * lp - (alpha - 1) * lq, -np.inf)
            d = logsumexp(terms, axis=-1) / (alpha - 1)
    return cast("np.ndarray", np.maximum(d, 0.0))


def renyi_divergence(logp: np.ndarray, logq: np.ndarray, alpha: float,
                     symmetric: bool = False) -> np.ndarray | float:
    """Rényi divergence ``D_α(P‖Q)`` of discrete distributions given as log-probabilities.

    Eq. 5 in log space: ``D_α(P‖Q) = logsumexp(α log p − (α−1) log q) / (α−1)``; ``α = 1`` is the
    KL divergence, ``α = inf`` the maximum log ratio over the support of ``P``. The last axis is
    the outcome axis; leading axes broadcast. ``symmetric=True`` gives Eq. 6,
    ``max(D_α(P‖Q), D_α(Q‖P))``. Rounding below zero is clipped to 0.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    lp = np.asarray(logp, dtype=np.float64)
    lq = np.asarray(logq, dtype=np.float64)
    d = _renyi(lp, lq, alpha)
    if symmetric:
        d = np.maximum(d, _renyi(lq, lp, alpha))
    return float(d) if d.ndim == 0 else d


# ---------------------------------------------------------------------------------------------
# Algorithms 2 and 3 for Algorithm 1
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """Parameters of Algorithm 1 and their theoretical ``(ε, δ)`` at order ``α*``."""

    target_eps: float
    temperature: float
    clip: float
    subset_size: float
    alpha: float
    eps: float

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        for key in ("alpha", "subset_size"):
            if float(d[key]).is_integer():
                d[key] = int(d[key])
        return d


def theoretical_rdp(clip: float, subset_size: float, temperature: float, n_gen: int,
                    max_tokens: int, orders: Iterable[float] = DEFAULT_ORDERS) -> np.ndarray:
    """``ε_theoretical(α) = N_gen · T_max · ε_RDP(α)`` (App. C.3.1) at each order."""
    if not (n_gen >= 1 and max_tokens >= 1):
        raise ValueError(f"n_gen and max_tokens must be >= 1, got {n_gen} and {max_tokens}")
    event = DPTokenEvent(clip, subset_size, temperature)
    return RDPAccountant(orders).compose(event, n_gen * max_tokens).get_rdp()


def theoretical_epsilon(clip: float, subset_size: float, temperature: float, n_gen: int,
                        max_tokens: int, delta: float,
                        orders: Iterable[float] = DEFAULT_ORDERS) -> tuple[float, float]:
    """Algorithm 2 on ``ε_theoretical(α)``: ``(ε*, α*)`` for the given parameters."""
    orders = _orders_array(orders)
    rdp = theoretical_rdp(clip, subset_size, temperature, n_gen, max_tokens, orders)
    return rdp_to_approx_dp(orders, rdp, delta)


def epsilon_floor(delta: float, orders: Iterable[float] = DEFAULT_ORDERS) -> float:
    """The ε Algorithm 2 returns for zero RDP: no parameters can reach a target at or below it."""
    a = _orders_array(orders)
    return rdp_to_approx_dp(a, np.zeros_like(a), delta)[0]


def calibrate(target_eps: float, delta: float, *, clip: float, subset_size: float,
              temperature: float, n_gen: int, max_tokens: int, search: str = "temperature",
              orders: Iterable[float] = DEFAULT_ORDERS, iterations: int = 200) -> Calibration:
    """Algorithm 3: bisect one of ``temperature``, ``clip``, ``subset_size`` to meet ``target_eps``.

    ε_theoretical only depends on ``Δ = c/(sτ)`` and grows with it, so it falls with τ and s and
    rises with c. The search brackets the root by doubling/halving from the given value, then
    bisects in log space until the bracket is at float precision (the paper uses N = 22 linear
    steps). It returns the end of the bracket that satisfies ``ε ≤ target``; ``subset_size`` is
    rounded up to the smallest integer that still meets the target. The other two parameters
    stay at the values given.
    """
    if search not in SEARCHABLE:
        raise ValueError(f"search must be one of {', '.join(SEARCHABLE)}, got {search!r}")
    orders = tuple(_orders_array(orders))
    params = {"clip": float(clip), "subset_size": float(subset_size),
              "temperature": float(temperature)}
    floor = epsilon_floor(delta, orders)
    if not math.isfinite(target_eps):
        raise ValueError(f"target ε must be a finite number, got {target_eps}")
    if not target_eps > floor:
        raise ValueError(f"target ε = {target_eps:g} cannot be reached: with δ = {delta:g} and "
                         f"these orders ε is at least {floor:.4g} even with no privacy loss")

    def eps_at(x: float) -> tuple[float, float]:
        return theoretical_epsilon(**{**params, search: x}, n_gen=n_gen, max_tokens=max_tokens,
                                   delta=delta, orders=orders)

    def ok(x: float) -> bool:
        return eps_at(x)[0] <= target_eps

    safe_dir = 0.5 if search == "clip" else 2.0  # the factor that lowers ε
    x = float(params[search])
    step = safe_dir if not ok(x) else 1.0 / safe_dir
    prev = x
    for _ in range(2100):  # doubling covers every positive float
        prev, x = x, x * step
        if not 0 < x < math.inf:
            raise ValueError(f"no {search} in float64 meets target ε = {target_eps:g} with "
                             "the other parameters as given")
        if ok(x) != ok(prev):
            break
    else:  # pragma: no cover - unreachable for target above the floor
        raise ValueError(f"could not bracket {search} for target ε = {target_eps:g}")
    safe, unsafe = (x, prev) if ok(x) else (prev, x)
    for _ in range(iterations):
        mid = math.sqrt(safe) * math.sqrt(unsafe)  # the product may leave float64
        if mid in (safe, unsafe):
            break
        if ok(mid):
            safe = mid
        else:
            unsafe = mid
    if search == "subset_size":
        safe = float(math.ceil(safe))
        if safe > 1 and ok(safe - 1):
            safe -= 1
    eps, alpha = eps_at(safe)
    return Calibration(target_eps=float(target_eps), **{**params, search: safe},
                       alpha=alpha, eps=eps)
