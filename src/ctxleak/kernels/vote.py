"""The differentially private vote of "Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy" (Koga, Wu and Chaudhuri), torch only.

Each voter reads one shard of the documents and votes its most likely next token; the votes
form a histogram ``h`` over the vocabulary. Neighbouring datasets differ in one shard, so one
voter's vote moves: one count falls by 1 and another rises by 1 (ℓ∞ sensitivity 1, two counts
changed, not monotone).

- :func:`limited_domain`: the LimitedDomain mechanism of "Practical Differentially Private
  Top-k Selection with Pay-What-You-Get Composition" (Durfee and Rogers), top-1: Gumbel noise
  of scale ``b`` on the ``k̄`` largest counts and on the threshold ``h_(k̄+1) + gap``; the
  largest noisy value wins, the threshold's win is ⊥ (no token released).
  Its guarantee, under the vote-moving relation above (proved for this relation, so the gap
  holds 2 votes where the paper's add/remove relation needs 1): with
  ``gap = 2 + b·ln(min(2, k̄)/δ)`` one step is ``(2/b + ln(1 + δ), δ)``-DP. (Within the
  common candidates the noisy maximum is an exponential mechanism whose scores move by at
  most 1: a factor ``e^{2/b}``; at most ``min(2, k̄)`` candidates enter or leave the top ``k̄``,
  each at most 2 votes above ``h_(k̄+1)``, so each wins with probability at most
  ``e^{(2 − gap)/b}``: the ``δ``, and the ``1 + δ`` factor on the normaliser.)
  :func:`vote_scale` inverts it: the scale ``b`` whose step costs exactly ``ε``.
- :func:`svt_pays`: one test of the sparse-vector technique ("Understanding the Sparse Vector
  Technique for Differential Privacy", Lyu, Su and Li, Alg. 1 with one positive per round):
  the noisy number of voters that agree with the no-retrieval token against the noisy
  threshold; Laplace noise ``2/ε`` on the threshold and ``4/ε`` on each count, sensitivity 1,
  so a round ending in its first "pay" costs ``ε`` however many free steps it answered.

Noise comes from the ``torch.Generator`` the caller passes (seeded per response and step), in
float64 on the CPU, so a replayed step draws the same noise.
"""

from __future__ import annotations

import math

import torch

#: ⊥: the limited-domain vote released no token.
ABSTAIN = -1


def voter_tokens(voter_logits: torch.Tensor) -> torch.Tensor:
    """Each voter's most likely token: ``[m, V]`` logits -> ``[m]`` ids on the CPU (a tie inside
    a voter goes to the lowest token id)."""
    return torch.argmax(voter_logits, dim=-1).to("cpu")


def vote_counts(votes: torch.Tensor, vocab: int) -> torch.Tensor:
    """The histogram of the voters' tokens ``votes`` (:func:`voter_tokens`): ``[vocab]``
    float64 counts."""
    return torch.bincount(votes.to("cpu"), minlength=vocab).to(torch.float64)


def check_step(eps: float, delta: float) -> None:
    """``ε`` finite and > ``ln(1 + δ)``, ``δ`` in (0, 1): a :class:`ValueError` otherwise."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    if not (math.isfinite(eps) and eps > math.log1p(delta)):
        raise ValueError(f"a vote's eps must be a finite number above ln(1 + delta), not {eps}")


def vote_scale(eps: float, delta: float) -> float:
    """The Gumbel scale ``b`` of a limited-domain step that is exactly ``(ε, δ)``-DP:
    ``2/b + ln(1 + δ) = ε``."""
    check_step(eps, delta)
    return 2.0 / (eps - math.log1p(delta))


def limited_domain_gap(scale: float, delta: float, domain: int = 1) -> float:
    """How far above the ``(k̄+1)``-th count the threshold sits:
    ``2 + b·ln(min(2, k̄)/δ)`` votes (``k̄ = domain``)."""
    if domain < 1:
        raise ValueError(f"domain must be >= 1, not {domain}")
    return 2.0 + scale * math.log(min(2, domain) / delta)


def gumbel(n: int, scale: float, generator: torch.Generator) -> torch.Tensor:
    """``n`` Gumbel(0, ``scale``) draws, float64 on the CPU."""
    u = torch.rand(n, dtype=torch.float64, generator=generator).clamp(min=1e-300)
    return -scale * torch.log((-torch.log(u)).clamp(min=1e-300))


def laplace(n: int, scale: float, generator: torch.Generator) -> torch.Tensor:
    """``n`` Laplace(0, ``scale``) draws, float64 on the CPU."""
    u = torch.rand(n, dtype=torch.float64, generator=generator) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())


def limited_domain(counts: torch.Tensor, scale: float, gap: float, domain: int,
                   generator: torch.Generator) -> int:
    """One limited-domain top-1 step (module docstring): the released token id, or
    :data:`ABSTAIN`. The ``domain`` largest counts (ties: lowest id first) and the threshold
    ``h_(domain+1) + gap`` each get one Gumbel draw, in that order."""
    counts = counts.to("cpu", torch.float64)
    k = min(domain, counts.numel())
    order = torch.sort(counts, descending=True, stable=True).indices
    top = order[:k]
    below = float(counts[order[k]]) if counts.numel() > k else 0.0
    noise = gumbel(k + 1, scale, generator)
    threshold = torch.tensor([below + gap], dtype=torch.float64)
    noisy = torch.cat([counts[top] + noise[:k], threshold + noise[k:]])
    best = int(torch.argmax(noisy))
    return ABSTAIN if best == k else int(top[best])


def limited_domain_probs(counts: torch.Tensor, scale: float, gap: float, domain: int
                         ) -> torch.Tensor:
    """The exact output distribution of :func:`limited_domain`: ``[V + 1]`` float64
    probabilities, entry ``V`` for ⊥ (:func:`limited_domain_logprobs`, exponentiated)."""
    return torch.exp(limited_domain_logprobs(counts, scale, gap, domain))


def limited_domain_logprobs(counts: torch.Tensor, scale: float, gap: float, domain: int
                            ) -> torch.Tensor:
    """:func:`limited_domain_probs` as float64 log-probabilities (−inf outside the limited
    domain), exact where the probabilities underflow: the largest of Gumbel-noised values is a
    softmax of the values over ``scale`` (the noisy maximum is an exponential mechanism)."""
    counts = counts.to("cpu", torch.float64)
    k = min(domain, counts.numel())
    order = torch.sort(counts, descending=True, stable=True).indices
    below = float(counts[order[k]]) if counts.numel() > k else 0.0
    values = torch.cat([counts[order[:k]], torch.tensor([below + gap], dtype=torch.float64)])
    weights = torch.log_softmax(values / scale, dim=0)
    out = torch.full((counts.numel() + 1,), -math.inf, dtype=torch.float64)
    out[order[:k]] = weights[:k]
    out[-1] = weights[-1]
    return out


def svt_pays(agree: float, threshold: float, eps: float, generator: torch.Generator,
             rho: float) -> bool:
    """One step of a sparse-vector round (module docstring): True (pay for a vote) when the
    noisy count of agreeing voters, ``agree`` + Laplace(4/ε), falls below the round's noisy
    threshold ``threshold + rho`` (``rho``: the round's Laplace(2/ε) draw, :func:`laplace`)."""
    nu = float(laplace(1, 4.0 / eps, generator)[0])
    return agree + nu < threshold + rho


__all__ = ["ABSTAIN", "check_step", "gumbel", "laplace", "limited_domain", "limited_domain_gap",
           "limited_domain_logprobs", "limited_domain_probs", "svt_pays", "vote_counts",
           "vote_scale", "voter_tokens"]
