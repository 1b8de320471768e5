"""The DP token mechanism (Algorithm 1, App. C.1 of "Evaluating Privacy Leakage From
In-Context Learning") and its data-dependent loss.

Model-free tensor maths: the engine hands over the next-token logits of the ``s`` one-shot
prompts (``[..., s, V]``); these functions clip, aggregate, give the sampling distribution and,
from the same clipped rows (no extra forward pass), the remove-one neighbouring distributions and
the data-dependent per-token RDP of Theorem C.6 / App. C.3.3. Divergences are in float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def clip_logits(z: torch.Tensor, c: float) -> torch.Tensor:
    """``clip_c(z)_i = max(−c, z_i − max_j z_j + c)`` over the last axis (App. C.1).

    The top token maps to ``c``, everything lies in ``[−c, c]``; ``-inf`` logits map to ``−c``.
    """
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(f"clip c must be a finite number > 0, got {c}")
    return torch.clamp(z - z.amax(dim=-1, keepdim=True) + c, min=-c)


def aggregate(clipped: torch.Tensor) -> torch.Tensor:
    """``ℓ(Z) = (1/s) Σ_p clip_c(z_p)``: mean over the prompt axis, ``[..., s, V] → [..., V]``."""
    return clipped.mean(dim=-2)


def _check_temperature(temperature: float) -> None:
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / τ`` in float64; a τ so small that a finite logit overflows is refused (the
    softmax of infinities is not a distribution)."""
    _check_temperature(temperature)
    z = logits.double() / temperature
    if bool(torch.isinf(z[torch.isfinite(logits)]).any()):
        raise ValueError(f"temperature {temperature:g} is too small: logits / temperature "
                         "overflow float64 (use a temperature of at least 1e-100)")
    return z


def excluded_mask(excluded: Sequence[int], vocab: int,
                  device: torch.device | str | None = None) -> torch.Tensor | None:
    """The ``[V]`` boolean mask of the token ids the engine excluded at this step (EOS before
    the minimum length: ``combine``'s ``excluded`` argument), or None when there are none.
    They are not outputs of this step: clipping would map their masked logits to ``−c`` and
    leave them sampleable, so they are removed from the released distribution after
    aggregation (:func:`sampling_logprobs` ``excluded=``). A token is never inferred to be
    excluded from its logit value: a genuine logit, however low, clips to ``−c`` (App. C.1)."""
    ids = [int(t) for t in excluded]
    if not ids:
        return None
    if any(not 0 <= t < vocab for t in ids):
        raise ValueError(f"excluded token ids must be in [0, {vocab}), got {ids}")
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[ids] = True
    return mask


def _remove(logits: torch.Tensor, excluded: torch.Tensor | None) -> torch.Tensor:
    if excluded is None:
        return logits
    return logits.masked_fill(excluded.unsqueeze(-2) if excluded.dim() < logits.dim()
                              else excluded, -math.inf)


def sampling_logprobs(mean_logits: torch.Tensor, temperature: float,
                      excluded: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probabilities of ``softmax(z̄ / τ)`` (Algorithm 1, line 4), float64, over the output set
    without the ``excluded`` tokens (they get probability 0; the rest renormalise). Removing
    outputs after aggregation keeps the exponential-mechanism form of App. C.1 on the smaller
    set, with the same sensitivity, so the theoretical accounting is unchanged."""
    z = _scaled(mean_logits, temperature)
    if excluded is not None:
        z = z.masked_fill(excluded, -math.inf)
    return torch.log_softmax(z, dim=-1)


def leave_one_out_logprobs(clipped: torch.Tensor, temperature: float,
                           excluded: torch.Tensor | None = None) -> torch.Tensor:
    """Row ``p``: log-probs of ``softmax(mean of the other s−1 clipped rows / τ)``, float64.

    The remove-one neighbour ``A(D∖{p}, x₀)`` of Theorem C.6, computed as ``(Σ_q z_q − z_p)/(s−1)``
    from the rows already in hand, over the same output set as the mechanism (``excluded``
    tokens removed after aggregation). ``[..., s, V] → [..., s, V]``.
    """
    _check_temperature(temperature)
    s = clipped.shape[-2]
    if s < 2:
        raise ValueError(f"leave-one-out needs at least 2 prompts, got {s}")
    x = clipped.double()
    loo = _remove((x.sum(dim=-2, keepdim=True) - x) / (s - 1), excluded)
    return torch.log_softmax(_scaled(loo, temperature), dim=-1)


def renyi_divergence_torch(logp: torch.Tensor, logq: torch.Tensor, alpha: float) -> torch.Tensor:
    """``D_α(P‖Q)`` over the last axis from log-probs (Eq. 5 in log space); torch twin of
    :func:`ctxleak.mitigations.accounting.renyi_divergence`. ``α = 1`` is KL, ``α = inf`` the max
    log ratio; rounding below zero is clipped to 0."""
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    logp, logq = torch.broadcast_tensors(logp, logq)
    support = logp > -math.inf
    ninf = torch.tensor(-math.inf, dtype=logp.dtype, device=logp.device)
    if abs(alpha - 1) < 1e-6:  # the KL limit; avoids (α − 1) cancellation
        d = torch.where(support, logp.exp() * (logp - logq), torch.zeros_like(logp)).sum(-1)
    elif math.isinf(alpha):
        d = torch.where(support, logp - logq, ninf).amax(-1)
    else:
        terms = torch.where(support, alpha * logp - (alpha - 1) * logq, ninf)
        d = torch.logsumexp(terms, dim=-1) / (alpha - 1)
    return d.clamp(min=0.0)


def leave_one_out_divergences(clipped: torch.Tensor, temperature: float, alpha: float,
                              excluded: torch.Tensor | None = None) -> torch.Tensor:
    """``D_α^↔(A(D) ‖ A(D∖{p}))`` (Eq. 6) for every prompt ``p``: ``[..., s, V] → [..., s]``,
    both distributions over the output set without the ``excluded`` tokens."""
    logp = sampling_logprobs(aggregate(clipped.double()), temperature, excluded).unsqueeze(-2)
    logq = leave_one_out_logprobs(clipped, temperature, excluded)
    return torch.maximum(renyi_divergence_torch(logp, logq, alpha),
                         renyi_divergence_torch(logq, logp, alpha))


def data_dependent_token_rdp(clipped: torch.Tensor, temperature: float, alpha: float,
                             excluded: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token data-dependent RDP (Theorem C.6, Eq. 7; App. C.3.3), float64.

    ``max_p max(D_α(P‖Q_p), D_α(Q_p‖P))`` with ``P`` the mechanism's distribution and ``Q_p`` its
    remove-one neighbour. ``[..., s, V] → [...]`` (a 0-d tensor for a single step).

    Note: the paper's per-token bound with ``Δ = c/(sτ)`` holds for this neighbour only up to a
    factor: ``Q_p`` differs from ``P`` by logits ``(z_p − z̄_{−p})/(sτ)`` whose range can reach
    ``4c/(sτ)``, so the sure bound is :class:`~ctxleak.mitigations.accounting.DPTokenEvent` with
    clip ``2c`` (at most 4× the paper's zCDP term).
    """
    return leave_one_out_divergences(clipped, temperature, alpha, excluded).amax(dim=-1)
