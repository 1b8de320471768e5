"""DP-RAG (ctxleak.mitigations.dp_rag, dp_retrieval): the composed ε recomputed by hand, the
token and threshold distributions by hand, their privacy-loss bounds on random neighbours, the
decoded records, and one-line errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ctxleak.errors import ConfigError
from ctxleak.mitigations.dp_rag import DPRAG, calibrate_token_eps, composed_epsilon, dp_rag_logprobs
from ctxleak.mitigations.dp_retrieval import (
    private_retrieval,
    retrieval_odds,
    threshold_grid,
    threshold_logprobs,
)
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding

DOCS = ("paris is the capital of france", "rome is the capital of italy",
        "berlin is the capital of germany")


def _hand_epsilon(eps_t: float, steps: int, delta: float) -> float:
    """Rényi DP of the ε-bounded-range exponential mechanism written out: per order α,
    min(αε²/2, log((sinh(αε) − sinh((α−1)ε)) / sinh ε)/(α−1)), times the steps, then
    ε(α) = R + log((α−1)/α) − (log δ + log α)/(α−1), minimised over α = 2..99; and the basic
    composition steps·ε beside it."""
    best = math.inf
    for a in range(2, 100):
        sinh = math.log((math.sinh(a * eps_t) - math.sinh((a - 1) * eps_t))
                        / math.sinh(eps_t)) / (a - 1)
        r = steps * min(a * eps_t ** 2 / 2, sinh, eps_t)
        best = min(best, r + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return min(max(best, 0.0), steps * eps_t)


@pytest.mark.parametrize("eps_t,steps,delta", [(0.5, 1, 1e-3), (0.2, 20, 1e-3),
                                               (0.1, 50, 1e-5), (1.0, 3, 1e-2)])
def test_composed_epsilon_by_hand(eps_t, steps, delta):
    assert composed_epsilon(eps_t, steps, 0.0, delta) == pytest.approx(
        _hand_epsilon(eps_t, steps, delta), rel=1e-9)


def test_one_token_is_its_own_epsilon():
    # a single ε-DP step: the basic bound (0.5) beats the Rényi conversion at δ = 1e-3
    assert composed_epsilon(0.5, 1, 0.0, 1e-3) == 0.5
    assert composed_epsilon(0.5, 1, 0.25, 1e-3) == 0.75


def test_calibration_meets_the_budget():
    eps_t = calibrate_token_eps(5.0, 50, 0.5, 1e-3)
    assert composed_epsilon(eps_t, 50, 0.5, 1e-3) <= 5.0
    assert composed_epsilon(eps_t * 1.001, 50, 0.5, 1e-3) > 5.0
    claim = DPRAG(eps=5).claim(Decoding())
    assert claim.eps == pytest.approx(5.0, rel=1e-6) and claim.eps <= 5.0
    assert (claim.delta, claim.relation) == (1e-3, "document")


def test_token_distribution_by_hand():
    # V = 3, T = 1, one document, C = 1, ε_t = 2
    prior_logits = torch.tensor([2.0, 1.0, 0.0])
    doc_logits = torch.tensor([[0.0, 3.0, 0.0]])
    prior = np.exp([2.0, 1.0, 0.0]) / np.exp([2.0, 1.0, 0.0]).sum()
    doc = np.exp([0.0, 3.0, 0.0]) / np.exp([0.0, 3.0, 0.0]).sum()
    s = np.clip(np.log(doc) - np.log(prior), 0, 1)
    w = prior * np.exp(2 * s / 1)
    expected = np.log(w / w.sum())
    got = dp_rag_logprobs(doc_logits, prior_logits, 2.0, 1.0, 1.0)
    assert np.allclose(got.numpy(), expected, atol=1e-12)
    # no document: the prior itself; an excluded token: probability 0
    none = dp_rag_logprobs(torch.zeros((0, 3)), prior_logits, 2.0, 1.0, 1.0)
    assert np.allclose(none.exp().numpy(), prior, atol=1e-12)
    masked = dp_rag_logprobs(doc_logits, prior_logits, 2.0, 1.0, 1.0, excluded=(1,))
    assert masked[1] == -math.inf and masked.exp().sum() == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(5))
def test_adding_a_document_moves_every_token_by_at_most_eps(seed):
    """Pure ε_t-DP per token (and ε_t-bounded range): for random logits, the log-probabilities
    with and without one document differ by at most ε_t, and their spread by at most ε_t."""
    g = torch.Generator().manual_seed(seed)
    docs = 3 * torch.randn((4, 50), generator=g, dtype=torch.float64)
    prior = 3 * torch.randn(50, generator=g, dtype=torch.float64)
    eps_t = 0.7
    with_all = dp_rag_logprobs(docs, prior, eps_t, 2.0, 0.8)
    without = dp_rag_logprobs(docs[1:], prior, eps_t, 2.0, 0.8)
    diff = with_all - without
    assert float(diff.abs().max()) <= eps_t + 1e-12
    assert float(diff.max() - diff.min()) <= eps_t + 1e-12
    assert float(diff.abs().max()) > 0.1 * eps_t  # the document does move the distribution


def test_threshold_distribution_by_hand():
    grid = threshold_grid(0.0, 1.0, 3)  # 0, 0.5, 1
    scores = [0.9, 0.6, 0.2]
    # n(τ) = 3, 2, 0; u = -|n - 2| = -1, 0, -2; P ∝ exp(ε u / 2) with ε = 2
    w = np.exp([-1.0, 0.0, -2.0])
    got = threshold_logprobs(scores, grid, 2, 2.0).exp().numpy()
    assert np.allclose(got, w / w.sum(), atol=1e-12)
    tau, used = private_retrieval(scores, grid, 2, 2.0, torch.Generator().manual_seed(0))
    assert used == tuple(i for i, s in enumerate(scores) if s >= tau)


@pytest.mark.parametrize("seed", range(5))
def test_threshold_is_eps_dp_under_adding_a_document(seed):
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 1, 8).tolist()
    grid = threshold_grid(0.0, 1.0, 16)
    p = threshold_logprobs(scores, grid, 3, 1.5)
    q = threshold_logprobs(scores + [float(rng.uniform())], grid, 3, 1.5)
    assert float((p - q).abs().max()) <= 1.5 + 1e-12


def _request(lm, seed=0, scores=None, docs=DOCS):
    def prompt(texts):
        return lm.encode(f"{' '.join(texts)} question : what is the capital ? answer :".strip())

    return AnswerRequest(documents=docs, prompt=prompt, seed=seed, scores=scores)


def test_decode_records_and_retrieval(tiny_lm):
    mech = DPRAG(eps=4, eps_retrieval=1.0, top_k=1)
    dec = Decoding(max_new_tokens=6, min_new_tokens=6)
    eps_t = mech.token_eps(dec)
    reqs = [_request(tiny_lm, seed=s, scores=(0.95, 0.5, 0.05)) for s in range(4)]
    answers = mech.answer(tiny_lm, reqs, dec)
    for answer in answers:
        assert answer.claim == mech.claim(dec) and answer.claim.eps <= 4
        assert answer.tokens_paid == len(answer.steps) == 6
        assert all(s["eps_step"] == eps_t and s["paid"] for s in answer.steps)
        tau = answer.steps[0]["threshold"]
        assert answer.documents_used == tuple(i for i, s in enumerate((0.95, 0.5, 0.05))
                                              if s >= tau)
        assert [s["token_id"] for s in answer.steps] == list(answer.response_ids)
    # seeded: alone, together and again the same
    alone = [mech.answer(tiny_lm, [r], dec)[0] for r in reqs]
    assert [a.response_ids for a in alone] == [a.response_ids for a in answers]
    # without scores: every document, no threshold
    plain = mech.answer(tiny_lm, [_request(tiny_lm)], dec)[0]
    assert plain.documents_used == (0, 1, 2) and plain.steps[0]["threshold"] is None


def test_a_huge_budget_follows_the_documents(tiny_lm):
    """ε_t → large: the clipped ratios dominate the prior: the token the documents raise most."""
    dec = Decoding(max_new_tokens=1, min_new_tokens=1, temperature=1.0)
    answer = DPRAG(eps=5000, clip=1.0, eps_retrieval=0).answer(tiny_lm, [_request(tiny_lm)],
                                                               dec)[0]
    assert answer.steps[0]["logp_mechanism"] > -1e-3  # almost sure
    assert answer.steps[0]["documents"] == 3


@pytest.mark.parametrize("kwargs,param", [
    ({"eps": 0}, "eps"), ({"eps": -2}, "eps"), ({"eps": 1, "delta": 0}, "delta"),
    ({"eps": 1, "delta": 1.5}, "delta"), ({"eps": 1, "clip": 0}, "clip"),
    ({"eps": 1, "eps_retrieval": 1}, "eps_retrieval"), ({"eps": 1, "top_k": 0}, "top_k"),
    ({"eps": 1, "score_range": (1.0, 0.0)}, "score_range"), ({"eps": 1, "grid": 1}, "grid"),
    ({"eps": 1, "grid": 4097}, "grid"),  # a request's grid cannot fill the server's memory
])
def test_bad_parameters_name_the_parameter(kwargs, param):
    with pytest.raises(ConfigError) as info:
        DPRAG(**kwargs)
    assert info.value.param == param and "\n" not in str(info.value)


def test_bad_requests(tiny_lm):
    with pytest.raises(ConfigError) as info:
        DPRAG(eps=1).answer(tiny_lm, [_request(tiny_lm, docs=())], Decoding())
    assert info.value.param == "documents"
    with pytest.raises(ConfigError) as info:
        DPRAG(eps=1).answer(tiny_lm, [_request(tiny_lm, scores=(0.5,))], Decoding())
    assert info.value.param == "scores"


@pytest.mark.parametrize("seed", range(4))
def test_each_token_stays_within_the_accountants_renyi_bound(seed):
    """The accountant charges each token the exponential mechanism's Rényi bound at ε_t: the
    actual Rényi divergences between the step's distributions with and without a document,
    both ways, stay under it at every order."""
    from ctxleak.mitigations.accounting import ExponentialMechanismEvent, renyi_divergence

    g = torch.Generator().manual_seed(seed)
    docs = 4 * torch.randn((3, 40), generator=g, dtype=torch.float64)
    prior = 4 * torch.randn(40, generator=g, dtype=torch.float64)
    eps_t, orders = 0.8, np.arange(2, 40, dtype=np.float64)
    bound = ExponentialMechanismEvent(eps_t).rdp(orders)
    p = dp_rag_logprobs(docs, prior, eps_t, 1.5, 1.0).numpy()
    q = dp_rag_logprobs(docs[:2], prior, eps_t, 1.5, 1.0).numpy()
    for a, b in zip(orders, bound):
        assert renyi_divergence(p, q, a, symmetric=True) <= b + 1e-12


def test_retrieval_odds_by_hand_and_against_the_sampled_retrieval():
    """Two documents at similarity 0.2 and 0.6, thresholds 0, 0.5 and 1, one document wanted,
    ε = 2: the thresholds keep 2, 1 and 0 documents, with weights e^-1, 1 and e^-1, so at least
    one is kept with probability (1 + e^-1)/Z and (1 + 2e^-1)/Z are kept on average, Z = 1 +
    2e^-1; and the sampled retrieval keeps one as often (within 4 standard errors)."""
    grid = threshold_grid(0.0, 1.0, 3)
    z = 1 + 2 * math.exp(-1)
    keep, kept = retrieval_odds([0.2, 0.6], grid, top_k=1, eps=2.0)
    assert keep == pytest.approx((1 + math.exp(-1)) / z, abs=1e-12)
    assert kept == pytest.approx((1 + 2 * math.exp(-1)) / z, abs=1e-12)
    scores = [0.05, 0.31, 0.32, 0.44, 0.9]
    grid = threshold_grid(0.0, 1.0, 17)
    keep, kept = retrieval_odds(scores, grid, top_k=2, eps=0.7)
    gen = torch.Generator().manual_seed(0)
    draws = [private_retrieval(scores, grid, 2, 0.7, gen)[1] for _ in range(4000)]
    share = sum(1 for used in draws if used) / len(draws)
    assert abs(share - keep) < 4 * math.sqrt(keep * (1 - keep) / len(draws))
    assert sum(len(u) for u in draws) / len(draws) == pytest.approx(kept, rel=0.05)
