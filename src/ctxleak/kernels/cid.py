"""Context Influence Decoding's arithmetic (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.4, Eq. 6; bounded CID: App. B, Alg. 1), torch only.

- :func:`cid_logprobs`: ``log p̄_λ = log_softmax((λ·z_D + (1−λ)·z_∅) / T)`` in float64, where
  ``z_D`` and ``z_∅`` are the next-token logits with and without the context D;
- :func:`bounded_lambdas`: Alg. 1's λ_t of every row of ``[T, V]`` logits at once, the largest λ
  in ``[0, λ_max]`` whose mixture stays within ε/2 of the no-context distribution (a bracketed
  Halley search, float64, about 4 passes over the vocabulary per row); :func:`bounded_lambda` is
  the same search on one step's ``[V]`` logits, run as a one-row batch, so a decoding step and a
  scored response get the same floats;
- :func:`divergence_at`: plain CID's ex-post figure of one step, the maximum of Alg. 1 line 2
  at the step's own λ (no search);
- :data:`MASKED_LOGIT`: the logit of a token that must never be drawn;
- :func:`check_cid_settings`: the one check of λ, T and ε, raising :class:`CIDSettingError`
  (a ``ValueError`` naming the parameter) that ctxleak's callers turn into their own errors.

Nothing here imports anything but torch and the standard library (see :mod:`ctxleak.kernels`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

#: The logit of a token that must never be drawn (EOS before the minimum length): probability 0.
#: Finite, so that linear mixtures of logits with negative weights (CID with λ > 1) never give
#: inf − inf = NaN.
MASKED_LOGIT = -1e30

#: Bounded CID's λ_t is found to within ``min(λ_max, 1) · 2**-LAMBDA_BITS`` (≈ 9e-13): its search
#: stops when the bracket around the edge of the bound is that narrow. The 40-step bisection it
#: replaced reached ``λ_max · 2**-40``.
LAMBDA_BITS = 40
#: A backstop on each row's probes after the one at λ_max (rows take about 3; a row of NaN
#: logits is bisected down to λ = 0 in about LAMBDA_BITS probes).
MAX_PROBES = 3 * LAMBDA_BITS
#: Bounded CID aims this far below ε/2 so that float noise between the two streams' forward
#: passes (about 1e-7 in float32) can never push a released token over the bound.
BOUND_MARGIN = 1e-6
#: Device types on which the λ_t searches of several answers' steps run as one search
#: (:func:`bounded_lambda_rows`): on a GPU a one-row search is bound by its kernel launches
#: (about 96), so 32 rows cost about what one does (H200: 29 against 116 ms for 32 answers);
#: on a CPU one row's float64 passes stay in the cache and 8 rows at once were slower than 8
#: one-row searches (16.8 against 12.7 ms on a 2-core CPU).
SEARCH_TOGETHER_ON = frozenset({"cuda"})


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
    Raises :class:`CIDSettingError` for the first one outside its domain (a bool is not a
    number: ``True`` is refused, not read as 1)."""
    for name, value in (("lam", lam), ("temperature", temperature), ("bounded_eps", bounded_eps)):
        if isinstance(value, bool):
            raise CIDSettingError(f"{name} must be a number, not {value}", name)
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
        return _mixture(z_context, z_empty, w, temperature, ends=True)
    if lam == 0:
        mixed = z_empty
    elif lam == 1:
        mixed = z_context
    else:
        mixed = lam * z_context + (1.0 - lam) * z_empty
    return torch.log_softmax(mixed / temperature, dim=-1)


def _mixture(z_context: torch.Tensor, z_empty: torch.Tensor, w: torch.Tensor, temperature: float,
             ends: bool) -> torch.Tensor:
    """:func:`cid_logprobs` of float64 logits at per-row weights ``w`` (``[n, 1]``); ``ends``
    selects the stream itself on rows at λ = 0 or 1 (0 · -inf would be NaN), and can be left
    off where no row is at either."""
    mixed = w * z_context + (1.0 - w) * z_empty
    if ends:
        mixed = torch.where(w == 0, z_empty, torch.where(w == 1, z_context, mixed))
    return torch.log_softmax(mixed / temperature, dim=-1)


class _Rows(NamedTuple):
    """The float64 rows a λ_t search reads, on the logits' device, ``[n, V]`` unless said: the
    two streams' logits, the no-context log-probs at T, the tokens masked in either stream,
    ``Δ = z_D − z_∅`` (0 where masked) and ``Δ²`` (``powers``, ``[n, 2, V]``), and the drawable
    tokens of largest and of smallest Δ (``ends``, ``[n, 2]``)."""

    zc: torch.Tensor
    ze: torch.Tensor
    base: torch.Tensor
    invalid: torch.Tensor
    powers: torch.Tensor
    ends: torch.Tensor

    def take(self, rows: torch.Tensor | slice) -> _Rows:
        return _Rows(*(t[rows] for t in self))


def _rows(zc: torch.Tensor, ze: torch.Tensor, temperature: float) -> _Rows:
    """:class:`_Rows` of float64 logits ``[n, V]`` at temperature T."""
    base = torch.log_softmax(ze / temperature, dim=-1)
    invalid = (ze <= MASKED_LOGIT / 2) | (zc <= MASKED_LOGIT / 2)
    delta = (zc - ze).masked_fill_(invalid, 0.0)
    ends = torch.stack([torch.where(invalid, -math.inf, delta).max(dim=-1).indices,
                        torch.where(invalid, math.inf, delta).min(dim=-1).indices], dim=-1)
    return _Rows(zc, ze, base, invalid, torch.stack([delta, delta * delta], dim=1), ends)


def _probe(r: _Rows, lam: torch.Tensor, temperature: float, ends: bool) -> torch.Tensor:
    """One pass over the vocabulary at one λ per row (``ends``: some row is at λ = 0 or 1), on
    the logits' device: ``[n, 5]`` of the divergence ``max_y |log p̄_λ(y|D) − log p(y|∅)|``
    over the drawable tokens (the floats of :func:`cid_logprobs`, App. B, Alg. 1 line 2), the
    log-prob shifts of ``r.ends``, and the mixture's moments ``E[Δ], E[Δ²]``."""
    logp = _mixture(r.zc, r.ze, lam[:, None], temperature, ends)
    diff = (logp - r.base).masked_fill_(r.invalid, 0.0)
    shifts = diff.gather(-1, r.ends)
    div = diff.abs_().amax(dim=-1, keepdim=True)
    return torch.cat([div, shifts, (r.powers @ logp.exp_()[:, :, None])[:, :, 0]], dim=-1)


def _right_of_zero(r: _Rows) -> torch.Tensor:
    """``[n, 3]`` on the logits' device: the no-context mass of the drawable tokens and its
    unnormalised moments ``Σ p(y|∅)·Δ(y), Σ p(y|∅)·Δ(y)²`` over them."""
    p0 = r.base.exp().masked_fill_(r.invalid, 0.0)
    return torch.cat([p0.sum(dim=-1, keepdim=True), (r.powers @ p0[:, :, None])[:, :, 0]], -1)


def _rounded(sums: torch.Tensor) -> torch.Tensor:
    """Sums over the vocabulary rounded to float32's 24 bits. A lone row's sum is split across
    threads (or blocks) where a batch's rows are each summed whole, so the same row's sum can
    differ in its last bits between batch shapes; rounded, each row steers its search as it
    would alone (log_softmax and the maximum, which decide the bound, do not depend on it)."""
    return sums.float().double()


def _slope(spread: torch.Tensor, shifts: torch.Tensor, moments: torch.Tensor,
           temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The divergence's slope and curvature in λ from the log-prob shifts of the tokens of
    largest and smallest Δ (their Δ: ``spread``) and the mixture's moments ``E[Δ], E[Δ²]``
    (``[n, 2]`` each). ``log p̄_λ(y) − log p(y|∅)`` is ``λ·Δ(y)/T − (A(λ) − A(0))`` with A the
    log-partition, so the largest shift is at the token of largest Δ, the most negative at the
    one of smallest Δ, and the divergence is the larger of the two;
    ``d/dλ log p̄_λ(y) = (Δ(y) − E[Δ]) / T`` and ``A'' = Var[Δ] / T²``."""
    mean, var = moments[:, 0], moments[:, 1] - moments[:, 0] ** 2
    top = shifts[:, 0] >= -shifts[:, 1]
    slope = torch.where(top, spread[:, 0] - mean, mean - spread[:, 1]) / temperature
    return slope, torch.where(top, -var, var) / temperature ** 2


def _quotient(a: float, b: float) -> float:
    """``a / b`` as float64 tensors divide (IEEE 754: ±inf or NaN where ``b`` is 0, where
    Python's ``/`` raises)."""
    if b != 0:
        return a / b
    return math.nan if a == 0 or math.isnan(a) else \
        math.copysign(math.inf, a) * math.copysign(1.0, b)


def _edge(r: _Rows, half: float, lam_max: float, temperature: float, at_max: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1 line 2's λ_t of rows whose bound fails at ``lam_max`` (``at_max``: the
    :func:`_probe` there, on the host): the largest λ with divergence ≤ ``half``, and that
    divergence (float64 ``[n]`` each, on the host).

    A bracket [lo, hi] holds the edge: lo keeps the bound (divergence ≤ half), hi breaks it (or is
    NaN). The divergence grows with λ (it is the larger of a concave and a convex increasing
    function of λ, see :func:`_slope`), so each probe's verdict moves one end. The next probe is
    Halley's step from the last one; it falls back to the midpoint when the step leaves the
    bracket or is not under half the step before last (Numerical Recipes' ``rtsafe`` rule). A
    step within the tolerance lands just past the estimate, on the far side of the edge, so that
    the probe closes the bracket. torch has no bracketed root finder, hence this one; each row
    is probed until its bracket is narrower than ``min(lam_max, 1) · 2**-LAMBDA_BITS``, the
    rows still open probed together. The passes over the vocabulary run on the logits' device;
    each bracket's few numbers are Python floats (the same IEEE float64 arithmetic as a tensor's,
    without a tensor operation's overhead, most of a one-row search's time on a CPU)."""
    tol = min(lam_max, 1.0) * 2.0 ** -LAMBDA_BITS
    dev, n = r.zc.device, at_max.shape[0]
    spread = r.powers[:, 0].gather(-1, r.ends).cpu()
    zero = _right_of_zero(r).cpu()
    mass = _rounded(zero[:, 0])
    moments = _rounded(zero[:, 1:]) / mass[:, None]
    # every shift is 0 at λ = 0 (but for the jump): the one that grows fastest binds
    slope0, curve0 = _slope(spread, spread - moments[:, :1], moments, temperature)
    # each end of each row's bracket: [λ, its divergence, divergence − half, slope, curvature]
    top = at_max[:, 0]
    low = torch.stack([torch.zeros_like(top), torch.zeros_like(top), -mass.log() - half, slope0,
                       curve0], dim=1).tolist()
    high = torch.stack([torch.full_like(top, lam_max), top, top - half,
                        *_slope(spread, at_max[:, 1:3], _rounded(at_max[:, 3:]), temperature)],
                       dim=1).tolist()
    for lo, hi in zip(low, high):  # past the bound at every λ > 0: λ_t = 0
        hi[0] = tol if lo[2] > 0 else lam_max
    # the first step from the end nearer the edge; the last two probes' distances (any step)
    from_low = [not abs(h[2]) < -lo[2] for lo, h in zip(low, high)]
    steps = [(2 * h[0], 2 * h[0]) for h in high]
    open_rows = [i for i in range(n) if high[i][0] - low[i][0] > tol]
    for _ in range(MAX_PROBES):
        if not open_rows:
            break
        xs = []
        for i in open_rows:
            lo, hi = low[i][0], high[i][0]
            origin, _, g, slope, curve = low[i] if from_low[i] else high[i]
            # Halley's step: Newton's, corrected by the curvature (at most doubled)
            c = _quotient(g * curve, 2 * slope * slope)
            step = _quotient(-g, slope * (1 - (0.5 if c > 0.5 else c)))
            # within the tolerance: just past the estimate, on the far side of the edge
            x = origin + (step + (tol / 4 if from_low[i] else -tol / 4)
                          if abs(step) <= tol / 2 else step)
            dist = abs(x - origin)
            take = lo < x < hi and dist <= steps[i][1] / 2
            steps[i] = (dist if take else 0.5 * (hi - lo), steps[i][0])
            xs.append(x if take else 0.5 * (lo + hi))
        rows = torch.tensor(open_rows) if len(open_rows) < n else slice(None)
        on = r if isinstance(rows, slice) else r.take(rows.to(dev))
        at = torch.tensor(xs, dtype=torch.float64)
        got = _probe(on, at.to(dev), temperature, any(x in (0, 1) for x in xs)).cpu()
        probes = torch.stack([at, got[:, 0], got[:, 0] - half,
                              *_slope(spread[rows], got[:, 1:3], _rounded(got[:, 3:]),
                                      temperature)], dim=1).tolist()
        for i, probe in zip(open_rows, probes):
            from_low[i] = probe[1] <= half
            (low if from_low[i] else high)[i] = probe
        open_rows = [i for i in open_rows if high[i][0] - low[i][0] > tol]
    return (torch.tensor([e[0] for e in low], dtype=torch.float64),
            torch.tensor([e[1] for e in low], dtype=torch.float64))


def bounded_lambdas(z_context: torch.Tensor, z_empty: torch.Tensor, eps: float, lam_max: float,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row t of ``[T, V]`` logits, Alg. 1's λ_t (line 2): the largest λ in
    ``[0, lam_max]`` with ``max_y |log p̄_λ(y|D) − log p(y|∅)| ≤ ε/2`` (both at temperature T),
    to within ``min(lam_max, 1) · 2**-LAMBDA_BITS`` and never above the edge (a bracketed Halley
    search in float64, :func:`_edge`: about 4 passes over the vocabulary per row, the one at
    ``lam_max`` included, where bisection took 41), and that maximum (float64 ``[T]`` each).

    λ = 0 always qualifies (the maximum is 0). Tokens masked out in either stream (at or below
    ``MASKED_LOGIT / 2``: EOS before the minimum length) are left out of the maximum: both
    distributions give them probability 0. A row whose maximum at ``lam_max`` is not within the
    bound (NaN included) is searched; where ε/2 is below :data:`BOUND_MARGIN`, λ_t = 0. Scoring a
    neighbour context D' = D∖D_i as bounded CID would run on it uses this on z(·|D') and z(·|∅):
    Thm B.1 compares the mechanism on D with the mechanism on D', which picks its own λ'_t."""
    r = _rows(z_context.double(), z_empty.double(), temperature)
    half = eps / 2.0 - BOUND_MARGIN
    cap = torch.full((r.zc.shape[0],), float(lam_max), dtype=torch.float64, device=r.zc.device)
    at_max = _probe(r, cap, temperature, ends=lam_max in (0, 1))
    top = at_max[:, 0].contiguous()
    binds = ~(top <= half)
    if not bool(binds.any()):
        return cap, top
    lam, div = torch.where(binds, 0.0, cap), torch.where(binds, 0.0, top)
    if half >= 0:  # below 0 not even λ = 0 keeps the bound: λ_t = 0
        rows: torch.Tensor | slice = binds.nonzero()[:, 0] if not bool(binds.all()) \
            else slice(None)
        found = _edge(r.take(rows), half, float(lam_max), temperature, at_max[rows].cpu())
        lam[rows], div[rows] = (t.to(lam.device) for t in found)
    return lam, div


def bounded_lambda(z_context: torch.Tensor, z_empty: torch.Tensor, eps: float, lam_max: float,
                   temperature: float) -> tuple[float, float]:
    """:func:`bounded_lambdas` of one decoding step's logits ``[V]`` (a one-row batch): the
    step's λ_t (``lam_max`` itself where the bound holds at it) and its
    ``max_y |log p̄_λ(y|D) − log p(y|∅)|``."""
    return bounded_lambda_rows([z_context], [z_empty], eps, lam_max, temperature)[0]


def divergence_at(z_context: torch.Tensor, z_empty: torch.Tensor, lam: float,
                  temperature: float) -> float:
    """``max_y |log p̄_λ(y|D) − log p(y|∅)|`` of one decoding step's logits ``[V]`` at ``lam``
    itself (App. B, Alg. 1 line 2's maximum, over the drawable tokens): plain CID's ex-post
    figure, ε_t = 2 · this, a number about this context alone and not a guarantee. The floats of
    :func:`bounded_lambda` at a bound that ``lam`` keeps (the same one-row probe)."""
    r = _rows(z_context[None].double(), z_empty[None].double(), temperature)
    at = torch.full((1,), float(lam), dtype=torch.float64, device=r.zc.device)
    return float(_probe(r, at, temperature, ends=lam in (0, 1))[0, 0])


def bounded_lambda_rows(z_context: Sequence[torch.Tensor], z_empty: Sequence[torch.Tensor],
                        eps: float, lam_max: float, temperature: float
                        ) -> list[tuple[float, float]]:
    """:func:`bounded_lambda` of each of several answers' steps (rows ``[V]`` each, on one
    device), from one :func:`bounded_lambdas` search of them all: the same floats, bit for bit,
    as each row searched alone. Worth it where :data:`SEARCH_TOGETHER_ON` says."""
    lams, divs = bounded_lambdas(torch.stack(list(z_context)), torch.stack(list(z_empty)), eps,
                                 lam_max, temperature)
    return [((lam_max if lam == lam_max else lam), div)
            for lam, div in zip(lams.tolist(), divs.tolist())]
