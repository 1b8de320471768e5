"""The DP vote's arithmetic (ctxleak.kernels.vote): the histogram, the limited-domain step's
scale and gap computed by hand, its sampler against its exact distribution, and its (ε, δ)
guarantee checked exactly on every pair of neighbouring histograms of a tiny vocabulary."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ctxleak.kernels.vote import (
    ABSTAIN,
    laplace,
    limited_domain,
    limited_domain_gap,
    limited_domain_logprobs,
    limited_domain_probs,
    svt_pays,
    vote_counts,
    vote_scale,
    voter_tokens,
)


def test_vote_counts_by_hand():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 1.0, 1.0], [0.0, 2.0, 2.0]])
    # voter 0 -> 1, voter 1 -> 0, voter 2 ties 1 and 2 -> the lowest id, 1
    assert voter_tokens(logits).tolist() == [1, 0, 1]
    assert vote_counts(voter_tokens(logits), 3).tolist() == [1.0, 2.0, 0.0]


def test_scale_and_gap_by_hand():
    eps, delta = 2.0, 1e-3
    b = 2 / (2 - math.log(1.001))
    assert vote_scale(eps, delta) == pytest.approx(b, rel=1e-15)
    assert limited_domain_gap(b, delta, 1) == pytest.approx(2 + b * math.log(1000), rel=1e-15)
    # two or more candidates: at most two of them change between neighbours
    assert limited_domain_gap(b, delta, 5) == pytest.approx(2 + b * math.log(2000), rel=1e-15)
    with pytest.raises(ValueError):
        vote_scale(0.0, delta)
    with pytest.raises(ValueError):
        vote_scale(1.0, 1.0)


def test_log_probabilities_by_hand_where_probabilities_underflow():
    # scale 0.01: token 0 leads the threshold 17 + 5 by 8 votes, 800 nats; ⊥'s probability
    # e^-800 is below float64's range, its log is not
    counts = torch.tensor([30.0, 17.0, 0.0])
    logp = limited_domain_logprobs(counts, 0.01, 5.0, 1)
    assert logp[0] == 0.0
    assert logp[3] == pytest.approx(-800.0, rel=1e-12)
    assert logp[1] == logp[2] == -math.inf
    assert limited_domain_probs(counts, 0.01, 5.0, 1)[3] == 0.0


def test_sampler_matches_exact_distribution():
    counts = torch.tensor([3.0, 1.0, 0.0, 2.0])
    scale, gap, domain = 1.0, 1.5, 2
    probs = limited_domain_probs(counts, scale, gap, domain)
    # candidates: token 0 (3 votes), token 3 (2 votes); threshold 1 + 1.5 = 2.5
    z = math.exp(3) + math.exp(2) + math.exp(2.5)
    assert probs[0] == pytest.approx(math.exp(3) / z)
    assert probs[3] == pytest.approx(math.exp(2) / z)
    assert probs[4] == pytest.approx(math.exp(2.5) / z)
    assert probs[1] == probs[2] == 0
    gen = torch.Generator().manual_seed(7)
    n = 20_000
    seen = torch.zeros(5)
    for _ in range(n):
        out = limited_domain(counts, scale, gap, domain, gen)
        seen[4 if out == ABSTAIN else out] += 1
    # 4 standard deviations of a binomial frequency
    tol = 4 * torch.sqrt(probs * (1 - probs) / n) + 1e-12
    assert torch.all((seen / n - probs).abs() <= tol)


def _histograms(voters: int, vocab: int):
    for votes in itertools.combinations_with_replacement(range(vocab), voters):
        yield torch.bincount(torch.tensor(votes), minlength=vocab).to(torch.float64)


@pytest.mark.parametrize("voters,vocab", [(4, 4), (6, 5)])
@pytest.mark.parametrize("domain", [1, 2, 3])
@pytest.mark.parametrize("eps,delta", [(1.0, 0.05), (3.0, 0.01)])
def test_every_neighbour_pair_within_eps_delta(voters, vocab, domain, eps, delta):
    """Neighbours move one vote; for every event E, P[E] ≤ e^ε·P'[E] + δ, i.e.
    Σ_o max(0, p_o − e^ε·p'_o) ≤ δ, over all histograms of a few voters on a few tokens."""
    scale = vote_scale(eps, delta)
    gap = limited_domain_gap(scale, delta, domain)
    worst = 0.0
    for h in _histograms(voters, vocab):
        p = limited_domain_probs(h, scale, gap, domain)
        for src, dst in itertools.permutations(range(vocab), 2):
            if h[src] == 0:
                continue
            h2 = h.clone()
            h2[src] -= 1
            h2[dst] += 1
            q = limited_domain_probs(h2, scale, gap, domain)
            worst = max(worst, float(torch.clamp(p - math.exp(eps) * q, min=0).sum()))
    assert worst <= delta


def test_without_the_gap_the_guarantee_fails():
    """The check above can fail: a threshold with no gap breaks (ε, δ) on some neighbours."""
    eps, delta, domain = 1.0, 0.05, 1
    scale = vote_scale(eps, delta)
    worst = 0.0
    for h in _histograms(4, 4):
        p = limited_domain_probs(h, scale, 0.0, domain)
        for src, dst in itertools.permutations(range(4), 2):
            if h[src]:
                h2 = h.clone()
                h2[src] -= 1
                h2[dst] += 1
                q = limited_domain_probs(h2, scale, 0.0, domain)
                worst = max(worst, float(torch.clamp(p - math.exp(eps) * q, min=0).sum()))
    assert worst > delta


def test_laplace_moments():
    x = laplace(200_000, 2.0, torch.Generator().manual_seed(3))
    assert float(x.mean()) == pytest.approx(0.0, abs=0.05)
    assert float(x.abs().mean()) == pytest.approx(2.0, rel=0.02)  # E|X| = scale


def test_svt_pays_when_agreement_is_far_below_the_threshold():
    gen = torch.Generator().manual_seed(0)
    # noise 4/ε = 0.004: the comparison is the plain one
    assert svt_pays(0.0, 2.0, 1000.0, gen, rho=0.0)
    assert not svt_pays(4.0, 2.0, 1000.0, gen, rho=0.0)


def test_svt_pays_with_the_laplace_probability():
    """P[pay] = P[agree + ν < threshold + ρ] with ν ~ Laplace(4/ε): for agree 2, threshold
    2.5, ρ 0.3, ε 2 that is the Laplace(2) CDF at 0.8, 1 − e^{−0.4}/2."""
    gen = torch.Generator().manual_seed(11)
    n = 20_000
    pays = sum(svt_pays(2.0, 2.5, 2.0, gen, rho=0.3) for _ in range(n)) / n
    p = 1 - 0.5 * math.exp(-0.4)
    assert abs(pays - p) <= 4 * math.sqrt(p * (1 - p) / n)
