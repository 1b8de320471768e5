"""Context Influence Decoding's arithmetic (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.4, Eq. 6; bounded CID: App. B, Alg. 1), torch only.

- :func:`cid_logprobs`: ``log p̄_λ = log_softmax((λ·z_D + (1−λ)·z_∅) / T)`` in float64, where
  ``z_D`` and ``z_∅`` are the next-token logits with and without the context D;
- :func:`bounded_lambdas`: Alg. 1's λ_t of every row of ``[T, V]`` logits at once, the largest λ
  in ``[0, λ_max]`` whose mixture stays within ε/2 of the no-context distribution (bisection,
  float64); :func:`bounded_lambda` is the same search on one step's ``[V]`` logits, run as a
  one-row batch, so a decoding step and a scored response get the same floats;
- :data:`MASKED_LOGIT`: the logit of a token that must never be drawn;
- :func:`check_cid_settings`: the one check of λ, T and ε, raising :class:`CIDSettingError`
  (a ``ValueError`` naming the parameter) that ctxleak's callers turn into their own errors.

Nothing here imports anything but torch and the standard library (see :mod:`ctxleak.kernels`).
"""

from __future__ import annotations

import math

import torch

#: The logit of a token that must never be drawn (EOS before the minimum length): probability 0.
#: Finite, so that linear mixtures of logits with negative weights (CID with λ > 1) never give
#: inf − inf = NaN.
MASKED_LOGIT = -1e30

#: Bisection steps of bounded CID's λ_t search (λ_t to within λ_max · 2⁻⁴⁰).
BISECTION_STEPS = 40
#: Bounded CID aims this far below ε/2 so that float noise between the two streams' forward
#: passes (about 1e-7 in float32) can never push a released token over the bound.
BOUND_MARGIN = 1e-6


class CIDSettingError(ValueError):
    """A setting of CID outside its domain; ``param`` names it (``lam``, ``temperature`` or
    ``bounded_eps``) and the message says what it must be."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_cid_settings(*, lam: float | None = None, temperature: float | None = None,
                       bounded_eps: float | None = None) -> None:
    """Check the settings given, in this order: λ finite and ≥ 0 (0 = no context, 1 = plain
    decoding, > 1 amplifies the context), T finite and > 0, bounded CID's ε finite and ≥ 0
    (ε = 0 leaves only λ_t = 0: the no-context answer).
    Raises :class:`CIDSettingError` for the first one outside its domain."""
    if lam is not None:
        if not math.isfinite(lam):
            raise CIDSettingError(f"lam must be a finite number, not {lam}", "lam")
        if lam < 0:
            raise CIDSettingError(f"lam must be >= 0 (0 = no context, 1 = plain decoding), "
                                  f"not {lam}", "lam")
    if temperature is not None:
        if not math.isfinite(temperature):
            raise CIDSettingError(f"temperature must be a finite number, not {temperature}",
                                  "temperature")
        if temperature <= 0:
            raise CIDSettingError(f"temperature must be > 0, not {temperature}", "temperature")
    if bounded_eps is not None:
        if not math.isfinite(bounded_eps):
            raise CIDSettingError(f"bounded_eps must be a finite number, not {bounded_eps}",
                                  "bounded_eps")
        if not bounded_eps >= 0:
            raise CIDSettingError(f"bounded_eps must be >= 0 (0: λ_t = 0, the no-context "
                                  f"answer), not {bounded_eps}", "bounded_eps")


def cid_logprobs(z_context: torch.Tensor, z_empty: torch.Tensor, lam: float | torch.Tensor,
                 temperature: float) -> torch.Tensor:
    """``log p̄_λ = log_softmax((λ·z_D + (1−λ)·z_∅) / T)`` in float64 (Eq. 6).

    λ = 0 and λ = 1 select one stream exactly, so λ = 0 is bit-for-bit no-context decoding.
    ``lam`` may also be a tensor of one λ per row of ``[T, V]`` logits (bounded CID's λ_t,
    App. B, Alg. 1); λ_t = 0 or 1 rows are then exact too (the other weight is an exact 0).
    """
    z_context, z_empty = z_context.double(), z_empty.double()
    if isinstance(lam, torch.Tensor):
        w = lam.to(z_context.device, torch.float64).reshape(-1, *([1] * (z_context.dim() - 1)))
        mixed = w * z_context + (1.0 - w) * z_empty
        # rows at λ = 0 or 1 take one stream as it is (0 · -inf would be NaN)
        mixed = torch.where(w == 0, z_empty, torch.where(w == 1, z_context, mixed))
        return torch.log_softmax(mixed / temperature, dim=-1)
    if lam == 0:
        mixed = z_empty
    elif lam == 1:
        mixed = z_context
    else:
        mixed = lam * z_context + (1.0 - lam) * z_empty
    return torch.log_softmax(mixed / temperature, dim=-1)


def bounded_lambdas(z_context: torch.Tensor, z_empty: torch.Tensor, eps: float, lam_max: float,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row t of ``[T, V]`` logits, Alg. 1's λ_t (line 2): the largest λ in
    ``[0, lam_max]`` with ``max_y |log p̄_λ(y|D) − log p(y|∅)| ≤ ε/2`` (both at temperature T),
    found by bisection in float64, and that maximum (float64 ``[T]`` each).

    λ = 0 always qualifies (the maximum is 0). Tokens masked out in either stream (at or below
    ``MASKED_LOGIT / 2``: EOS before the minimum length) are left out of the maximum: both
    distributions give them probability 0. A row whose maximum at ``lam_max`` is not within the
    bound (NaN included) is bisected. Scoring a neighbour context D' = D∖D_i as bounded CID
    would run on it uses this on z(·|D') and z(·|∅): Thm B.1 compares the mechanism on D with
    the mechanism on D', which picks its own λ'_t."""
    zc, ze = z_context.double(), z_empty.double()
    base = torch.log_softmax(ze / temperature, dim=-1)
    invalid = (ze <= MASKED_LOGIT / 2) | (zc <= MASKED_LOGIT / 2)
    half = eps / 2.0 - BOUND_MARGIN

    def divergence(lam: torch.Tensor) -> torch.Tensor:
        diff = (cid_logprobs(zc, ze, lam, temperature) - base).abs()
        return diff.masked_fill(invalid, 0.0).amax(dim=-1)

    cap = torch.full((zc.shape[0],), float(lam_max), dtype=torch.float64, device=zc.device)
    top = divergence(cap)
    binds = ~(top <= half)
    if not bool(binds.any()):
        return cap, top
    lo, hi, lo_div = torch.zeros_like(cap), cap.clone(), torch.zeros_like(cap)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        d = divergence(mid)
        ok = d <= half
        lo, lo_div = torch.where(ok, mid, lo), torch.where(ok, d, lo_div)
        hi = torch.where(ok, hi, mid)
    return torch.where(binds, lo, cap), torch.where(binds, lo_div, top)


def bounded_lambda(z_context: torch.Tensor, z_empty: torch.Tensor, eps: float, lam_max: float,
                   temperature: float) -> tuple[float, float]:
    """:func:`bounded_lambdas` of one decoding step's logits ``[V]`` (a one-row batch): the
    step's λ_t (``lam_max`` itself where the bound holds at it) and its
    ``max_y |log p̄_λ(y|D) − log p(y|∅)|``."""
    lams, divs = bounded_lambdas(z_context[None], z_empty[None], eps, lam_max, temperature)
    lam, div = lams.tolist()[0], divs.tolist()[0]
    return (lam_max if lam == lam_max else lam), div
