"""Monte Carlo susceptibility (Du et al. 2024, "Context versus Prior Knowledge in Language
Models", §3; Eq. 1-2 and §3.2 of "Efficiently Computing Susceptibility to Context in Language
Models").

For a query q and contexts c drawn from a distribution over contexts (here the empirical p̂ of the
distinct sampled contexts), with ``p(a | c, q)`` the next-token distribution over the full
vocabulary after the prompt ``c + q``:

* the reference is the marginal ``p̄(a | q) = Σ_c p̂(c)·p(a | c, q)`` (Eq. 1 summed over c), not
  the distribution without context;
* susceptibility ``χ(q) = Σ_c p̂(c)·KL(p(·|c,q) ‖ p̄(·|q)) = I(C; A | Q = q)`` (Eq. 2), the mutual
  information of context and answer, so ``0 ≤ χ ≤ H(p̂) ≤ log(#distinct contexts)``;
* the persuasion score of a context is ``ψ(c, q) = KL(p(·|c,q) ‖ p̄(·|q))`` (Du et al. §3.3).

``reference="no-context"`` replaces p̄ by ``p(a | q)`` without any context: a different quantity
(the expected divergence from the model's prior answer), not the mutual information, and named
separately in every output. Everything is float64; zero probabilities contribute nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import build_prompt, fit_to_window
from ctxleak.engine.scoring import next_token_logprobs

REFERENCES = ("marginal", "no-context")
PROMPT_TEMPLATE = "{context}{query}"


@dataclass(frozen=True)
class MCResult:
    """``chi`` (nats), ``psi[n]`` per distinct context, their weights p̂, and the reference
    log-distribution ``ref_logprobs[V]`` (the marginal, or the no-context distribution)."""

    chi: float
    psi: np.ndarray
    weights: np.ndarray
    ref_logprobs: torch.Tensor
    reference: str = "marginal"
    context_tokens_cut: tuple[int, ...] = ()  # per context: tokens cut to fit the window


def _weights(weights: Sequence[float] | np.ndarray, n: int) -> torch.Tensor:
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"need one weight per context: {n} contexts, {tuple(w.shape)} weights")
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()) or float(w.sum()) <= 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    return w / w.sum()


def marginal_logprobs(logprobs: torch.Tensor, weights: Sequence[float] | np.ndarray
                      ) -> torch.Tensor:
    """``log p̄(a) = log Σ_c p̂(c)·p(a | c)`` for ``logprobs[n, V]`` (float64, log space)."""
    lp = logprobs.double()
    w = _weights(weights, lp.shape[0])
    return torch.logsumexp(lp + torch.log(w)[:, None], dim=0)


def kl_rows(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """``KL(p_i ‖ q)`` for each row of ``logp[n, V]`` against ``logq[V]`` (or ``[n, V]``), in
    float64, with ``0·log 0 = 0``; ``inf`` where p puts mass on a token q rules out."""
    logp, logq = logp.double(), logq.double()
    p = torch.exp(logp)
    diff = torch.where(p > 0, logp - logq.expand_as(logp), torch.zeros_like(logp))
    return (p * diff).sum(dim=-1).clamp_min(0.0)


def susceptibility_from_logprobs(logprobs: torch.Tensor, weights: Sequence[float] | np.ndarray,
                                 reference_logprobs: torch.Tensor | None = None) -> MCResult:
    """χ and ψ from the next-token log-distributions ``logprobs[n, V]`` of n distinct contexts
    with weights p̂ (normalised here). ``reference_logprobs`` (``[V]``) replaces the marginal,
    e.g. by the no-context distribution."""
    lp = torch.as_tensor(logprobs).double()
    if lp.ndim != 2 or lp.shape[0] == 0:
        raise ValueError("logprobs must be [n_contexts, vocab] with at least one context")
    w = _weights(weights, lp.shape[0])
    if reference_logprobs is None:
        ref, name = marginal_logprobs(lp, w.numpy()), "marginal"
    else:
        ref, name = torch.as_tensor(reference_logprobs).double(), "no-context"
    psi = kl_rows(lp, ref)
    chi = float((w * psi)[w > 0].sum())  # a context drawn zero times adds nothing
    return MCResult(chi=chi, psi=psi.numpy(), weights=w.numpy(), ref_logprobs=ref,
                    reference=name)


def fitted_context_prompts(lm: LanguageModel, query: str, contexts: Sequence[str],
                           template: str = PROMPT_TEMPLATE
                           ) -> tuple[list[tuple[int, ...]], list[int]]:
    """Token ids of ``context + query`` for each context: template pieces, context and query
    tokenised separately and concatenated, so the query's ids are the same in every
    prompt and in the no-context prompt; and, per context, how many of its tokens were cut
    from its end so that the prompt fits the model's window (the query is always whole)."""
    fitted = [fit_to_window(lm, template, {"context": c, "query": query}) for c in contexts]
    return [p.ids for p, _ in fitted], [cut for _, cut in fitted]


def monte_carlo_susceptibility(lm: LanguageModel, query: str, contexts: Sequence[str],
                               weights: Sequence[float] | np.ndarray | None = None, *,
                               reference: str = "marginal", template: str = PROMPT_TEMPLATE,
                               reuse_prefix: bool = True) -> MCResult:
    """Monte Carlo susceptibility of ``query`` over the distinct ``contexts`` with weights p̂
    (default uniform): one next-token distribution per context, batched, the KV cache of their
    shared prefix (a chat template's system turn, the template start such as ``The capital of
    France is``) computed once when it is long enough to pay off."""
    return monte_carlo_many(lm, [(query, contexts, weights)], reference=reference,
                            template=template, reuse_prefix=reuse_prefix)[0]


MCJob = tuple[str, Sequence[str], "Sequence[float] | np.ndarray | None"]
"""(query, distinct contexts, their weights p̂ or None for uniform)."""


def monte_carlo_many(lm: LanguageModel, jobs: Sequence[MCJob], *, reference: str = "marginal",
                     template: str = PROMPT_TEMPLATE, reuse_prefix: bool = True
                     ) -> list[MCResult]:
    """:func:`monte_carlo_susceptibility` of several queries: the ``c + q`` prompts of all of
    them scored in one planner run, so the queries measured together fill its batches (and the
    prefix they share, such as a chat template's system turn, is computed once)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, not '{reference}'")
    prompts: list[tuple[int, ...]] = []
    bounds, cuts, owner = [0], [], []
    for query, contexts, _ in jobs:
        if not contexts:
            raise ValueError("need at least one context")
        fitted, cut = fitted_context_prompts(lm, query, contexts, template)
        prompts += fitted
        cuts.append(cut)
        if reference == "no-context":
            prompts.append(build_prompt(lm, template, {"context": "", "query": query}).ids)
        owner += [len(bounds) - 1] * (len(prompts) - bounds[-1])
        bounds.append(len(prompts))
    if not jobs:
        return []
    # one prefix reference for all (a shared system turn computed once); under a
    # batch-invariant policy each query's prompts in passes of their own
    logprobs = next_token_logprobs(lm, prompts, reuse_prefix=reuse_prefix, examples=owner)
    out = []
    for (_, contexts, weights), a, b, cut in zip(jobs, bounds[:-1], bounds[1:], cuts):
        w = np.ones(len(contexts)) if weights is None else np.asarray(weights, dtype=np.float64)
        rows = logprobs[a:b]
        if reference == "no-context":
            result = susceptibility_from_logprobs(rows[:-1], w, reference_logprobs=rows[-1])
        else:
            result = susceptibility_from_logprobs(rows, w)
        out.append(replace(result, context_tokens_cut=tuple(cut)))
    return out
