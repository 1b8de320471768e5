"""Fisher susceptibility (Efficiently Computing Susceptibility to Context in Language Models §4, Eq.
4-11), in the team's reading.

The paper's equations did not survive in the copy this implementation was built from; this
reading of them is ctxleak's, kept configurable. Let e be the input embeddings of the query's
tokens, flattened (§4.1: the context is re-parameterised as a perturbation of the query's
embeddings), and ``p(a | e)`` the next-token distribution. The Fisher information of the answer about e is
``I(e) = Σ_a p(a|e)·∇_e log p(a|e)·∇_e log p(a|e)ᵀ`` (Eq. 4), summed over the top-k next tokens
(Eq. 11, default k = 10). A second-order expansion gives ``KL(p(·|e) ‖ p(·|e+δ)) ≈ ½·δᵀI(e)δ``
(Eq. 5); with the context perturbation δ ~ (μ = 0, Σ = σ²I) (Eq. 8) its expectation is (Eq. 9-10)

    χ_F(q) = ½·σ²·tr I(e) = ½·σ²·Σ_{a ∈ top-k} p(a|e)·‖∇_e log p(a|e)‖²,   σ² = 1 by default.

By default the top-k distribution is renormalised before its Fisher information is taken
(``truncation="renormalised"``, :func:`fisher_trace`): the sum above with p̃ = p / Σ_top-k p and
the gradients of log p̃; ``truncation="raw"`` keeps the plain partial sum.

One forward pass and k vector-Jacobian products batched in one backward
(``torch.autograd.grad(..., is_grads_batched=True)``), as in
:func:`ctxleak.engine.gradients.next_token_embedding_grads`. With ``reuse_prefix`` (default) the
tokens before the query (BOS, a chat template's system turn) go through the model once without a
graph and enter as a KV cache, so the backward passes cover only the query and what follows it
instead of the whole prompt (with SmolLM2's chat template: 11 of 35 positions). The tokens and
gradients are the same as the engine's (tests check it). ``vocab="full"`` sums over the whole
vocabulary (the exact trace; V products in chunks, for small models and for validation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ctxleak.engine.forward import PrefixKV
from ctxleak.engine.gradients import (
    frozen_weights,
    input_embeddings,
    next_token_embedding_grads,
    next_token_embedding_grads_many,
    next_token_log_distribution,
)
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import Prompt, build_prompt
from ctxleak.methods.susceptibility.montecarlo import PROMPT_TEMPLATE

FISHER_VOCABS = ("topk", "full")
FISHER_TRUNCATIONS = ("renormalised", "raw")
FULL_VOCAB_CHUNK = 256  # vector-Jacobian products per batched backward with vocab="full"

#: Why Fisher susceptibility needs the model in-process (the words of a refusal).
FISHER_NEEDS = ("Fisher susceptibility differentiates the next-token distribution with respect "
                "to the query's input embeddings: load the model in-process")


@dataclass(frozen=True)
class FisherResult:
    """``chi = ½σ²·trace``; ``trace`` = tr I(e) over the chosen tokens; per token: ``token_ids``,
    ``probs`` p(a|e) and ``sq_norms`` (‖∇_e log p(a|e)‖², or with ``truncation="renormalised"``
    ‖∇_e log p̃(a|e)‖² of the renormalised top-k distribution; top-k only, empty for the full
    vocabulary); ``mass`` = Σ p(a|e) over the tokens summed."""

    chi: float
    trace: float
    sigma2: float
    token_ids: list[int]
    probs: list[float]
    sq_norms: list[float]
    mass: float
    n_query_tokens: int
    vocab: str = "topk"
    truncation: str = "renormalised"


def fisher_trace(logprobs: torch.Tensor, grads: torch.Tensor, truncation: str = "renormalised"
                 ) -> tuple[float, torch.Tensor]:
    """``tr I`` over the top-k tokens from ``logprobs[k]`` and gradients ``grads[k, ...]`` of
    ``log p(a|e)`` (float64); also returns the squared norms summed per token.

    ``truncation="renormalised"`` (default): the Fisher information of the top-k distribution
    itself, ``p̃(a) = p(a) / Σ_top-k p`` (Eq. 11 read as truncating the answer distribution):
    ``∇ log p̃(a) = g_a − ḡ`` with ``ḡ = Σ_b p̃(b)·g_b``, so ``tr I = Σ_a p̃(a)·‖g_a − ḡ‖²``; it
    is a proper Fisher information (the score has mean zero) and equals the full-vocabulary trace
    when k covers the vocabulary. On the default model it tracks Monte Carlo susceptibility
    better than ``"raw"``, ``tr I = Σ_a p(a)·‖g_a‖²`` (the plain partial sum, which grows with
    the probability mass left outside the top-k); see the README's Fisher/Monte Carlo table."""
    g = grads.double().reshape(grads.shape[0], -1)
    p = logprobs.double().exp()
    if truncation == "raw":
        sq = (g * g).sum(dim=1)
        return float((p * sq).sum()), sq
    if truncation != "renormalised":
        raise ValueError(f"truncation must be one of {FISHER_TRUNCATIONS}, not '{truncation}'")
    weights = p / p.sum()
    centred = g - (weights[:, None] * g).sum(dim=0)
    sq = (centred * centred).sum(dim=1)
    return float((weights * sq).sum()), sq


def fisher_chi(trace: float, sigma2: float) -> float:
    """Fisher susceptibility (Eq. 8-11 with μ = 0 and Σ = σ²I):
    ``χ_F = ½·σ²·tr I(e)``, where ``tr I(e) = Σ_a p(a|e)·‖∇_e log p(a|e)‖²`` is the trace of the
    Fisher information of the next-token distribution with respect to the query embeddings e
    (over the top-k tokens, or the whole vocabulary)."""
    return 0.5 * sigma2 * trace


def query_prompt(lm: LanguageModel, query: str, template: str = PROMPT_TEMPLATE) -> Prompt:
    """The prompt with an empty context (the same ids as the query part of every ``c + q``)."""
    prompt = build_prompt(lm, template, {"context": "", "query": query})
    start, end = prompt.spans["query"]
    if end <= start:
        raise ValueError(f"the query {query!r} has no tokens")
    return prompt


def fisher_susceptibility(lm: LanguageModel, query: str, *, top_k: int = 10, sigma2: float = 1.0,
                          vocab: str = "topk", template: str = PROMPT_TEMPLATE,
                          batched: bool = True, reuse_prefix: bool = True,
                          chunk: int = FULL_VOCAB_CHUNK,
                          prefix_kv: PrefixKV | None = None,
                          truncation: str = "renormalised") -> FisherResult:
    """χ_F of ``query`` (Eq. 10): gradients of the top-k next-token log-probabilities with
    respect to the query's input embeddings, one forward pass and one batched backward.

    Give the same ``prefix_kv`` store to every query of a run: the tokens before the query (a
    chat template's system turn) then go through the model once; ``reuse_prefix=False`` puts
    the whole prompt in the graph. The gradients (float64, CPU) are the engine's
    (:func:`~ctxleak.engine.gradients.next_token_embedding_grads`). ``truncation``: how the
    top-k distribution enters the trace (:func:`fisher_trace`); the full vocabulary needs none."""
    if vocab not in FISHER_VOCABS:
        raise ValueError(f"vocab must be one of {FISHER_VOCABS}, not '{vocab}'")
    if not sigma2 > 0:
        raise ValueError(f"sigma2 must be positive, got {sigma2}")
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if truncation not in FISHER_TRUNCATIONS:
        raise ValueError(f"truncation must be one of {FISHER_TRUNCATIONS}, not '{truncation}'")
    prompt = query_prompt(lm, query, template)
    span = prompt.spans["query"]
    n_tokens = span[1] - span[0]
    if vocab == "full":
        trace, mass = full_vocab_trace(lm, prompt.ids, span, chunk=chunk)
        return FisherResult(chi=fisher_chi(trace, sigma2), trace=trace, sigma2=sigma2, token_ids=[],
                            probs=[], sq_norms=[], mass=mass, n_query_tokens=n_tokens,
                            vocab="full")
    res = next_token_embedding_grads(lm.in_process(FISHER_NEEDS), prompt.ids, span,
                                     top_k=min(top_k, lm.vocab_size), batched=batched,
                                     cache_prefix=reuse_prefix,
                                     prefix_kv=prefix_kv if reuse_prefix else None)
    return _topk_result(res.token_ids, res.logprobs, res.grads, sigma2, n_tokens, truncation)


def _topk_result(token_ids: torch.Tensor, logprobs: torch.Tensor, grads: torch.Tensor,
                 sigma2: float, n_tokens: int, truncation: str) -> FisherResult:
    """One query's :class:`FisherResult` from its top-k tokens (:func:`fisher_trace`)."""
    trace, sq = fisher_trace(logprobs, grads, truncation)
    probs = logprobs.double().exp()
    return FisherResult(chi=fisher_chi(trace, sigma2), trace=trace, sigma2=sigma2,
                        token_ids=[int(t) for t in token_ids], probs=probs.tolist(),
                        sq_norms=sq.tolist(), mass=float(probs.sum()), n_query_tokens=n_tokens,
                        vocab="topk", truncation=truncation)


def fisher_susceptibility_many(lm: LanguageModel, queries: Sequence[str], *, top_k: int = 10,
                               sigma2: float = 1.0, vocab: str = "topk",
                               template: str = PROMPT_TEMPLATE,
                               prefix_kv: PrefixKV | None = None,
                               truncation: str = "renormalised") -> list[FisherResult]:
    """:func:`fisher_susceptibility` of several queries: their forward passes and vector-Jacobian
    products in one batch (:func:`~ctxleak.engine.gradients.next_token_embedding_grads_many`);
    the full vocabulary goes one query at a time."""
    if vocab != "topk" or top_k < 1 or not sigma2 > 0 or truncation not in FISHER_TRUNCATIONS:
        return [fisher_susceptibility(lm, q, top_k=top_k, sigma2=sigma2, vocab=vocab,
                                      template=template, prefix_kv=prefix_kv,
                                      truncation=truncation) for q in queries]
    prompts = [query_prompt(lm, q, template) for q in queries]
    spans = [p.spans["query"] for p in prompts]
    many = next_token_embedding_grads_many(lm.in_process(FISHER_NEEDS), [p.ids for p in prompts], spans,
                                           top_k=min(top_k, lm.vocab_size), prefix_kv=prefix_kv)
    return [_topk_result(res.token_ids, res.logprobs, res.grads, sigma2, end - start, truncation)
            for res, (start, end) in zip(many, spans)]


def full_vocab_trace(lm: LanguageModel, ids: Sequence[int], span: tuple[int, int], *,
                     chunk: int = FULL_VOCAB_CHUNK) -> tuple[float, float]:
    """``tr I(e) = Σ_{a ∈ V} p(a|e)·‖∇_e log p(a|e)‖²`` over the whole vocabulary: one forward
    pass (the full prompt, as the engine builds it), then V vector-Jacobian products in batched
    chunks. Returns (trace, total probability mass)."""
    local = lm.in_process(FISHER_NEEDS)
    start, end = span
    with torch.no_grad():
        base = input_embeddings(local, ids)
    wrt = base[start:end].clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    with torch.enable_grad(), frozen_weights(local.model):
        logp = next_token_log_distribution(local, torch.cat([base[:start], wrt, base[end:]], dim=0))
        probs = logp.detach().exp()
        vocab = logp.shape[0]
        for lo in range(0, vocab, chunk):
            hi = min(vocab, lo + chunk)
            sel = logp[lo:hi]
            eye = torch.eye(hi - lo, dtype=sel.dtype, device=sel.device)
            (grads,) = torch.autograd.grad(sel, wrt, grad_outputs=eye, is_grads_batched=True,
                                           retain_graph=hi < vocab)
            g = grads.double().reshape(hi - lo, -1)
            total += (probs[lo:hi] * (g * g).sum(dim=1)).sum().cpu()
    return float(total), float(probs.sum())
