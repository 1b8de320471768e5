"""DP-RAG over a datastore decodes at most top_k + 1 streams (issue 84): the threshold keeps at
most ``top_k`` of the documents at or above it, the highest similarities first and a tie going
to the document listed first; each step's exponent is then ε_t / 2, so a document that displaces
another still moves each token by at most ε_t."""

from __future__ import annotations

import pytest
import torch

from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.dp_rag import DPRAG, dp_rag_logprobs
from ctxleak.mitigations.dp_retrieval import passing, threshold_grid
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding


def test_passing_keeps_the_highest_and_breaks_ties_by_position():
    scores = [0.5, 0.7, 0.5, 0.5, 0.9, 0.2]
    assert passing(scores, 0.5) == (0, 1, 2, 3, 4)
    # 0.9 (index 4) and 0.7 (1), then the first of the three tied at 0.5 (index 0)
    assert passing(scores, 0.5, 3) == (0, 1, 4)
    assert passing(scores, 0.5, 4) == (0, 1, 2, 4)
    assert passing(scores, 0.95, 3) == ()
    assert passing([0.3] * 6, 0.0, 2) == (0, 1)  # all tied: the first two listed


def _tied_request(lm, n: int = 9, seed: int = 0) -> AnswerRequest:
    """``n`` documents with the same text (the same similarity: every threshold that keeps one
    keeps all of them) and two others."""
    store = Datastore(tuple((f"same-{i}", "the capital of italy is rome") for i in range(n))
                      + (("other-a", "bread and butter"), ("other-b", "a long coast")))

    def prompt(texts):
        return lm.encode(f"{' '.join(texts)} question : what is the capital of italy ? answer :")

    return AnswerRequest(documents=(), prompt=prompt, seed=seed,
                         query="what is the capital of italy ?", datastore=store)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_ties_never_decode_more_than_the_streams_reported(tiny_lm, top_k):
    mech = DPRAG(eps=4, top_k=top_k, score_range=(0.0, 0.05), grid=4)  # every τ keeps the 9
    dec = Decoding(max_new_tokens=3, min_new_tokens=3)
    assert mech.streams(11, True) == top_k + 1
    for seed in range(3):
        request = _tied_request(tiny_lm, seed=seed)
        answer = mech.answer(tiny_lm, [request], dec)[0]
        # the first top_k of the nine tied documents, never all nine
        assert answer.datastore_used == tuple(f"same-{i}" for i in range(top_k))
        assert all(s["documents"] == top_k for s in answer.steps)
        assert all(s["eps_step"] == pytest.approx(mech.token_eps(dec) / 2) for s in answer.steps)
        charges = mech.document_charges(request, dec)
        whole = [d for d, loss in charges.items() if loss.eps > mech.retrieval_eps]
        assert whole == list(answer.datastore_used)


def test_a_swap_moves_each_token_by_at_most_the_step_epsilon():
    """A document added that displaces one of the kept: the two distributions at ε_t / 2 differ
    by at most ε_t in log-probability, for every token (at ε_t they may differ by 2 ε_t)."""
    gen = torch.Generator().manual_seed(7)
    eps_t, clip = 0.8, 1.0
    worst_half = worst_full = 0.0
    for _ in range(200):
        prior = torch.randn(50, generator=gen) * 3
        kept = torch.randn(2, 50, generator=gen) * 3
        newcomer = torch.randn(1, 50, generator=gen) * 3
        before, after = kept, torch.cat([kept[:1], newcomer])  # kept[1] displaced
        for eps, worst in ((eps_t / 2, "half"), (eps_t, "full")):
            diff = (dp_rag_logprobs(before, prior, eps, clip, 1.0)
                    - dp_rag_logprobs(after, prior, eps, clip, 1.0)).abs().max().item()
            if worst == "half":
                worst_half = max(worst_half, diff)
            else:
                worst_full = max(worst_full, diff)
    assert worst_half <= eps_t + 1e-9
    assert worst_full > eps_t  # the reason for the half: a swap at ε_t passes ε_t


def test_without_datastore_every_passing_document_is_kept(tiny_lm):
    """Over the request's own documents nothing is capped (streams reports them all)."""
    mech = DPRAG(eps=4, top_k=1, score_range=(0.0, 0.05), grid=4)
    docs = ("a b", "c d", "e f")
    request = AnswerRequest(documents=docs, prompt=lambda t: tiny_lm.encode(" ".join(t) + " q"),
                            seed=1, scores=(0.5, 0.5, 0.5))
    answer = mech.answer(tiny_lm, [request], Decoding(max_new_tokens=2, min_new_tokens=2))[0]
    assert answer.documents_used == (0, 1, 2) and mech.streams(3, False) == 4
    assert threshold_grid(0.0, 0.05, 4)[-1] <= 0.5
