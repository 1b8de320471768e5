"""Influence of context n-grams on a response (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.1-3.2).

``τ_{i,n,t} = |log p̄_λ(y_t | D) − log p̄_λ(y_t | D∖D_{i,n})|`` where the ablated distribution is
``softmax((λ·z(·|D∖D_{i,n}) + (1−λ)·z(·|∅)) / T)``. Every ablated prompt shares the prompt up to
its deleted window with the full prompt, so the engine reuses that KV prefix. A backend that
scores CID itself (:data:`~ctxleak.engine.capabilities.CID_SCORING`: a vLLM server with
ctxleak's plugin) gets each prompt's response as a teacher-forced pair instead, and answers the
per-token numbers, not the whole next-token distribution at every position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from ctxleak.engine.batching import keeps_variants
from ctxleak.engine.capabilities import CID_SCORING, capabilities_of
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.pairs import PairJob, scoring_job
from ctxleak.engine.scoring import continuation_logits
from ctxleak.engine.served_client import ServerError
from ctxleak.engine.streams import mask_eos_before_min
from ctxleak.errors import ConfigError, warn
from ctxleak.kernels.cid import bounded_lambdas, cid_logprobs
from ctxleak.mitigations.influence import response_influence, token_influence
from ctxleak.mitigations.prompts import PromptParts


def windows(length: int, n: int, stride: int | None = None) -> list[tuple[int, int]]:
    """``[start, end)`` of each n-gram window over a context of ``length`` tokens. The default
    stride is n (non-overlapping, Def. 3.1); the last window may be shorter so every token is
    covered."""
    if n < 1:
        raise ConfigError(f"ngram must be >= 1, not {n}", param="ngram")
    if n > length:
        raise ConfigError(f"ngram={n} is larger than the context ({length} tokens)",
                          param="ngram")
    stride = n if stride is None else stride
    if stride < 1:
        raise ConfigError(f"stride must be >= 1, not {stride}", param="stride")
    out = []
    start = 0
    while start < length:
        out.append((start, min(start + n, length)))
        if start + n >= length:
            break
        start += stride
    return out


#: The most variants of one prompt that keep a KV cache of their own
#: (:func:`~ctxleak.engine.batching.keeps_variants`), whatever they leave out: a few documents,
#: or a short context's n-gram windows; a prompt with more variants (a long context's windows)
#: keeps them in one group, since each kept cache holds its whole prompt.
KEPT_VARIANTS = 16


@dataclass
class WindowInfluence:
    """``logp_context[t]`` = log p̄_λ(y_t | D) and ``logp_ablated[i, t]`` = log p̄_λ(y_t | D∖spans[i])
    from one scoring pass; ``tau[i, t]`` is their absolute difference (Def. 3.1)."""

    spans: list[tuple[int, int]]
    logp_context: np.ndarray
    logp_ablated: np.ndarray
    logp_empty: np.ndarray | None = None  # log softmax(z(·|∅)/T)(y_t), when asked for

    @property
    def tau(self) -> np.ndarray:
        return token_influence(self.logp_context[None, :], self.logp_ablated)

    @property
    def per_window(self) -> np.ndarray:
        """Response influence of each window (Def. 3.2: the sum over t)."""
        return cast("np.ndarray", response_influence(self.tau))


@dataclass(frozen=True)
class WindowRequest:
    """One example's n-gram scoring: its prompt parts, response, windows and CID settings."""

    parts: PromptParts
    response: Sequence[int]
    spans: Sequence[tuple[int, int]]
    lam: float | Sequence[float] = 1.0  # or one λ_t per response token (bounded CID)
    temperature: float = 1.0
    min_new_tokens: int = 0
    # the full prompt's KV cache, already computed (engine.local.prefill.prefill_alone): not recomputed
    prefix_cache: Any = field(default=None, repr=False, compare=False)
    # bounded CID (App. B, Alg. 1): ``lam`` is λ_max, and the full prompt and every
    # ablated one each get their own λ_t by Alg. 1's search on their own logits
    bounded_eps: float | None = None
    # also ``logp_empty``, the response's log-probs without the context at temperature T (the
    # no-context pass then runs at λ = 1 too), so that with ``logp_context`` the scoring gives
    # every float of the CID response (Def. 3.1 with n = |D|)
    with_empty: bool = False
    # another prompt this one shares a prefix with (its example's own full prompt, scored in
    # the same run, when this one holds a control context or a decoy): in-process, the prefix
    # is taken from that prompt's KV cache (the engine's ``bases``), not computed again
    base: tuple[int, ...] | None = field(default=None, repr=False, compare=False)


def window_influence(lm: LanguageModel, parts: PromptParts, response: Sequence[int], spans: Sequence[
        tuple[int, int]], *, lam: float | Sequence[float], temperature: float,
        min_new_tokens: int = 0, reuse_prefix: bool = True, bounded_eps: float | None = None
        ) -> WindowInfluence:
    """Teacher-forced influence of each context window on ``response`` under CID.

    The EOS mask of the first ``min_new_tokens`` steps is applied as during generation, so the
    scored distributions are the ones the response was drawn from. ``lam`` is one λ for every
    token, or one λ_t per response token (each context mixed with that λ_t).

    ``bounded_eps``: bounded CID (App. B, Alg. 1; ``lam`` is then λ_max). Its privacy
    loss (Thm B.1) compares the mechanism on D with the mechanism on D∖D_{i,n}, which picks its
    own λ'_t: so p̄(y_t | D) is mixed with the λ_t that Alg. 1 picks on z(·|D) and z(·|∅), and
    each p̄(y_t | D∖D_{i,n}) with the λ'_t it picks on z(·|D∖D_{i,n}) and z(·|∅).
    """
    response = list(response)
    if not isinstance(lam, (int, float)):
        if len(lam) != len(response):
            raise ValueError(f"need one lambda per response token ({len(response)}), "
                             f"got {len(lam)}")
        lam = [float(x) for x in lam]
    if bounded_eps is not None and not isinstance(lam, (int, float)):
        raise ValueError("with bounded_eps, lam is λ_max: one number, not one per token")
    request = WindowRequest(parts, response, list(spans), lam, temperature, min_new_tokens,
                            bounded_eps=bounded_eps)
    return window_influence_many(lm, [request], reuse_prefix=reuse_prefix)[0]


def window_influence_many(lm: LanguageModel, requests: Sequence[WindowRequest], *,
                          reuse_prefix: bool = True) -> list[WindowInfluence]:
    """:func:`window_influence` of several examples scored together: the no-context prompts of
    all of them in one planner run, then every example's full and ablated prompts in another,
    each example reusing the KV cache of its own full prompt's prefix (under a batch-invariant
    policy each example in passes of its own, see :mod:`ctxleak.engine.batching`)."""
    live = [r for r in requests if r.response]
    scored = iter(_scored_influences(lm, live, reuse_prefix) if live else [])
    return [next(scored) if r.response else
            WindowInfluence(list(r.spans), np.zeros(0), np.zeros((len(r.spans), 0)))
            for r in requests]


def _scored_influences(lm: LanguageModel, live: list[WindowRequest], reuse_prefix: bool
                       ) -> list[WindowInfluence]:
    """:func:`window_influence_many` of requests with a response: those the model's server
    scores under CID itself (:func:`_scored_in_server`), the others here
    (:func:`_scored_here`), in order."""
    there = _scored_in_server(lm, live)
    here = [r for g, r in enumerate(live) if g not in there]
    done = iter(_scored_here(lm, here, reuse_prefix) if here else [])
    return [there[g] if g in there else next(done) for g in range(len(live))]


def _scored_in_server(lm: LanguageModel, live: list[WindowRequest]) -> dict[int, WindowInfluence]:
    """The requests a backend with :data:`~ctxleak.engine.capabilities.CID_SCORING` scores, by
    index: each prompt (full and ablated) with the no-context one as a forced pair
    (:func:`~ctxleak.engine.pairs.scoring_job`), whose records give log p̄_λ(y_t | ·) and
    log p(y_t | ∅) at T, EOS masked before the minimum length (bounded CID: each prompt its own
    λ_t). A request a pair cannot carry (one λ per token), or all of them where the server
    fails or cannot take the pairs' prompts in one step, is left to :func:`_scored_here` (said
    in a warning)."""
    if CID_SCORING not in capabilities_of(lm):
        return {}
    jobs: dict[int, list[PairJob]] = {}
    for g, r in enumerate(live):
        prompts = [r.parts.full] + [r.parts.without(a, b) for a, b in r.spans]
        made = [scoring_job(p, r.parts.empty, r.response, lam=r.lam, temperature=r.temperature,
                            eps=r.bounded_eps, min_new_tokens=r.min_new_tokens,
                            stops=lm.eos_ids) for p in prompts]
        if all(j is not None for j in made):
            jobs[g] = cast("list[PairJob]", made)
    try:
        answers = iter(lm.decode_pairs([j for js in jobs.values() for j in js]) if jobs else [])
    except (ServerError, ConfigError) as exc:  # ConfigError: prompts over the step budget
        warn(f"{exc}: these responses are scored by whole next-token distributions instead")
        return {}
    out = {}
    for g, js in jobs.items():
        got = [[(e.logp_context, e.logp_empty) for e in next(answers).steps] for _ in js]
        rows = [np.array([c for c, _ in steps], dtype=np.float64) for steps in got]
        empty = np.array([e for _, e in got[0]], dtype=np.float64) if live[g].with_empty \
            else None
        ablated = np.stack(rows[1:]) if len(rows) > 1 else np.zeros((0, len(live[g].response)))
        out[g] = WindowInfluence(list(live[g].spans), rows[0], ablated, empty)
    return out


def _scored_here(lm: LanguageModel, live: list[WindowRequest], reuse_prefix: bool
                 ) -> list[WindowInfluence]:
    """The requests scored from the logits: the no-context pass, then one pass over every
    request's full and ablated prompts, cut back into one :class:`WindowInfluence` per
    request."""
    z_empty = _no_context_logits(lm, live)
    prompts, conts, owners, groups, bases = _prompt_variants(live,
                                                             reuse_prefix and keeps_variants())
    given = {g: r.prefix_cache for g, r in enumerate(live) if r.prefix_cache is not None}
    scored = continuation_logits(lm, prompts, conts, reuse_prefix=reuse_prefix,
                                 reduce=_cid_scorer(lm, live, owners, z_empty), groups=groups,
                                 prefix_caches=given, bases=bases)
    out = []
    begin = 0
    for g, r in enumerate(live):
        spans = list(r.spans)
        rows = scored[begin:begin + len(spans) + 1]
        begin += len(spans) + 1
        ablated = np.stack(rows[1:]) if spans else np.zeros((0, len(r.response)))
        empty = None
        if r.with_empty:
            logp = torch.log_softmax(z_empty[g].double() / r.temperature, dim=-1)
            empty = _response_logprobs(logp, r.response)
        out.append(WindowInfluence(spans, rows[0], ablated, empty))
    return out


def _masked(lm: LanguageModel, r: WindowRequest, logits: torch.Tensor) -> torch.Tensor:
    """``logits`` with EOS masked (in place) at the response positions before ``r``'s minimum
    length, as during generation."""
    return mask_eos_before_min(logits, lm.eos_ids, r.min_new_tokens)


def _uses_empty(r: WindowRequest) -> bool:
    """Whether the no-context logits enter ``r``'s CID mixture: only where λ != 1
    (:func:`~ctxleak.kernels.cid.cid_logprobs`), and always under bounded CID."""
    if r.bounded_eps is not None:
        return True
    return r.lam != 1 if isinstance(r.lam, (int, float)) else any(x != 1 for x in r.lam)


def _no_context_logits(lm: LanguageModel, live: list[WindowRequest]) -> dict[int, torch.Tensor]:
    """z(·|∅) at every response position (EOS masked, kept as float32: the head gave float32,
    half the memory) of each request whose mixture or ``with_empty`` needs it, by its index.

    One no-context pass per distinct (prompt, response, minimum length): an answer scored under
    several controls needs the same one each time (each request in a pass of its own, so
    sharing it changes no number)."""
    mixed = [g for g, r in enumerate(live) if r.with_empty or _uses_empty(r)]

    def key(g: int) -> tuple[Any, ...]:
        return tuple(live[g].parts.empty), tuple(live[g].response), live[g].min_new_tokens

    first_of: dict[tuple[Any, ...], int] = {}
    for g in mixed:
        first_of.setdefault(key(g), g)
    distinct = list(first_of.values())
    z_list = continuation_logits(
        lm, [live[g].parts.empty for g in distinct], [list(live[g].response) for g in distinct],
        reuse_prefix=False, examples=distinct,
        reduce=lambda i, z: _masked(lm, live[distinct[i]], z).float()) if distinct else []
    by_key = dict(zip(first_of, z_list))
    return {g: by_key[key(g)] for g in mixed}


def _prompt_variants(live: list[WindowRequest], keep: bool) -> tuple[
        list[list[int]], list[list[int]], list[int], list[int], dict[int, tuple[int, ...]]]:
    """Every request's full prompt and one prompt per window with that window deleted
    (D∖D_{i,n}), each with the request's response as continuation: the prompts, their
    continuations, the request each belongs to, the engine's group of each and the groups'
    bases. A request's prompts are its group (the full prompt's KV prefix reused, on the
    request's :attr:`~WindowRequest.base` where it has one). ``keep`` (prefixes reused and
    kept across calls, :func:`~ctxleak.engine.batching.keeps_variants`): each variant of a
    prompt with at most :data:`KEPT_VARIANTS` of them is a group of its own, built on the full
    prompt's cache, so that its prompt is computed once for every setting of a sweep,
    unpadded."""
    prompts: list[list[int]] = []
    conts: list[list[int]] = []
    owners: list[int] = []
    groups: list[int] = []
    bases = {g: r.base for g, r in enumerate(live) if r.base is not None}
    for g, r in enumerate(live):
        full = r.parts.full
        variants = [full] + [r.parts.without(a, b) for a, b in r.spans]
        alone = keep and len(r.spans) <= KEPT_VARIANTS
        base = tuple(full[:-1])
        for v, prompt in enumerate(variants):
            prompts.append(prompt)
            conts.append(list(r.response))
            owners.append(g)
            if alone and v > 0:
                groups.append(len(live) + len(groups))  # a group id of its own
                bases[groups[-1]] = base
            else:
                groups.append(g)
    return prompts, conts, owners, groups, bases


def _cid_weights(r: WindowRequest, z: torch.Tensor, z_e: torch.Tensor) -> float | torch.Tensor:
    """The λ that mixes this context's logits ``z`` with the no-context ones ``z_e``: ``r``'s λ
    (one, or one λ_t per token), or under bounded CID this context's own λ_t (App. B, Alg. 1)."""
    if r.bounded_eps is not None:
        return bounded_lambdas(z, z_e, r.bounded_eps, float(r.lam),  # type: ignore[arg-type]
                               r.temperature)[0]  # bounded CID has one λ (checked upstream)
    return r.lam if isinstance(r.lam, (int, float)) else \
        torch.as_tensor(list(r.lam), dtype=torch.float64)


def _cid_scorer(lm: LanguageModel, live: list[WindowRequest], owners: list[int],
                z_empty: dict[int, torch.Tensor]) -> Callable[[int, torch.Tensor], np.ndarray]:
    """The ``reduce`` of the full and ablated prompts' pass: prompt i's logits (EOS masked)
    mixed with its request's (``live[owners[i]]``) no-context logits by CID (or alone where
    there are none), at the request's T, read at the response tokens: log p̄_λ(y_t | ·)
    (Def. 3.1)."""
    def reduce(i: int, logits: torch.Tensor) -> np.ndarray:
        g = owners[i]
        r = live[g]
        _masked(lm, r, logits)
        z_e = z_empty[g].to(logits.device).double() if g in z_empty else logits
        logp = cid_logprobs(logits, z_e, _cid_weights(r, logits, z_e), r.temperature)
        return _response_logprobs(logp, r.response)

    return reduce


def _response_logprobs(logp: torch.Tensor, response: Sequence[int]) -> np.ndarray:
    """Row t of ``logp`` read at response token t: log p(y_t | ·), on the CPU."""
    target = torch.as_tensor(list(response), dtype=torch.long, device=logp.device)
    return logp.gather(1, target[:, None])[:, 0].cpu().numpy()


def next_token_unigram_influence(lm: LanguageModel, parts: PromptParts, prefix: Sequence[int],
                                 token: int, *, lam: float, temperature: float,
                                 min_new_tokens: int = 0) -> np.ndarray:
    """Influence of each single context token on one next token (Table 1):
    ``τ_i = |log p̄_λ(y | D, x, prefix) − log p̄_λ(y | D∖{d_i}, x, prefix)|``.

    The token follows ``prefix`` (response tokens already generated), so it is scored with the
    distribution it was sampled from: EOS masked when ``len(prefix) < min_new_tokens``, as in
    :meth:`~ctxleak.mitigations.cid.CID.answer`, at the same λ and T.
    """
    spans = windows(len(parts.context), 1)
    empty = None if parts.empty_ids is None else parts.empty_ids + tuple(prefix)
    res = window_influence(lm, PromptParts(parts.before, parts.context,
                                           tuple(parts.after) + tuple(prefix), empty),
                           [token], spans, lam=lam, temperature=temperature,
                           min_new_tokens=int(len(prefix) < min_new_tokens))
    return res.tau[:, 0]
