"""Context Influence Decoding (Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, Def. 3.4) and its bounded, ε-DP form (App. B, Alg. 1).

CID samples from ``p̄_λ(y_t) = softmax((λ·z(y_t | D, x, y<t) + (1−λ)·z(y_t | x, y<t)) / T)``
where z are logits with and without the context D. Two prompt streams, each KV-cached, are
combined step by step by the engine's :func:`~ctxleak.engine.generation.generate_many`, the
streams of many examples in one batched KV cache. A model whose server decodes CID itself
(:data:`~ctxleak.engine.capabilities.CID_DECODING`: vLLM with ctxleak's plugin) gets the answers
from there instead (:meth:`~ctxleak.engine.lm.LanguageModel.decode_pairs`), with the same
ledger; an answer the plugin cannot keep in step is decoded the other way, and a warning says
so. :class:`CID` is CID as one :class:`~ctxleak.mitigations.mechanisms.Mechanism` among the
defences: the influence run, the attack targets and the privacy proxy ask it as they ask any.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ctxleak.engine.batching import policy_of
from ctxleak.engine.capabilities import (
    NEXT_TOKEN_DISTRIBUTION,
    WEIGHTS,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.generation import generate_many, sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.kernels.cid import CIDSettingError, bounded_lambda, check_cid_settings, cid_logprobs
from ctxleak.mitigations.accounting import PureDPEvent
from ctxleak.mitigations.cid_steps import (
    CID_NEEDS,
    CIDSettings,
    cid_combine,
    cid_job,
    cid_route,
    in_server,
    ledger_of,
    replay_cid,
)
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Asked,
    Charge,
    Claim,
    Decoding,
    Listener,
    Mechanism,
    MechanismAnswer,
)
from ctxleak.mitigations.sampled import eos_masked


@dataclass(frozen=True)
class CID(Mechanism):
    """Context Influence Decoding as a mechanism (Def. 3.4): each response drawn from the
    mixture ``λ·z(y | D, x) + (1−λ)·z(y | x)`` of the prompt holding the request's documents
    and the prompt without them; ``bounded_eps``: bounded CID, each step's λ_t the largest in
    ``[0, lam]`` that keeps the token ε-DP under any replacement of the documents (App. B,
    Alg. 1, Thm B.1). Each answer carries its CID ledger (:class:`RowLedger`)."""

    lam: float = 1.0
    bounded_eps: float | None = None

    name: ClassVar[str] = "cid"
    min_documents: ClassVar[int] = 0
    over_datastore: ClassVar[bool] = False  # it reads the documents a request gives
    swept_by: ClassVar[tuple[str, ...]] = ("lambda_", "bounded_eps")

    def __post_init__(self) -> None:
        _check(lam=self.lam, bounded_eps=self.bounded_eps)

    def key(self) -> str:
        eps = "" if self.bounded_eps is None else f",bounded_eps={self.bounded_eps:g}"
        return f"cid(lam={self.lam:g}{eps})"

    def describe(self) -> str:
        if self.bounded_eps is not None:
            return f"bounded CID ε = {self.bounded_eps:g} per token (λ ≤ {self.lam:g})"
        return "plain decoding (CID λ = 1)" if self.lam == 1 else f"CID λ = {self.lam:g}"

    def settings(self, decoding: Decoding, ex_post: bool = False) -> CIDSettings:
        """These settings with ``decoding``'s temperature and lengths, as the steps decode
        them (``ex_post``: plain CID records each step's ex-post ε too)."""
        return CIDSettings(lam=self.lam, temperature=decoding.temperature,
                           max_new_tokens=decoding.max_new_tokens,
                           min_new_tokens=decoding.min_new_tokens,
                           bounded_eps=self.bounded_eps,
                           ex_post=ex_post and self.bounded_eps is None)

    def claim(self, decoding: Decoding) -> Claim:
        """The most a response may spend: nothing at λ = 0 (the documents are never read),
        bounded CID's ε per token over the most tokens a response may release
        (``max_new_tokens``, a stopping EOS among them; Thm B.1 by basic composition) under any
        replacement of the documents, no guarantee for plain CID at λ > 0."""
        if self.lam == 0:
            return Claim(0.0, 0.0, "context")
        if self.bounded_eps is None:
            return Claim(None)
        return Claim(self.bounded_eps * decoding.max_new_tokens, 0.0, "context")

    def spent(self, composed_eps: float | None, released: int) -> tuple[Claim, int]:
        """What one decoded response claims and the tokens that paid for it, from its ledger's
        composed ε and its ``released`` tokens (the stopping EOS included): ε = 0 at λ = 0
        (λ_t never exceeds λ = 0), bounded CID's composed ε, no guarantee otherwise."""
        if self.lam == 0:
            return Claim(0.0, 0.0, "context"), 0
        if composed_eps is not None:
            return Claim(composed_eps, 0.0, "context"), released
        return Claim(None), 0

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest], decoding: Decoding,
               *, context_caches: list[Any] | None = None, rescored: bool = False,
               use_cache: bool = True) -> list[MechanismAnswer]:
        """One CID response per request, the prompt with all its documents against the prompt
        without any, all requests in one batched KV cache (or inside vLLM with ctxleak's
        plugin). CID's fast paths: ``context_caches``, a list to fill with each request's KV
        cache of the prompt with its documents, prefilled alone, for n-gram scoring to reuse;
        ``rescored``: the caller scores the responses' floats itself, so they are not replayed;
        ``use_cache`` False: every step recomputes the whole prompt (a check of the cache)."""
        return self.answer_group(lm, [Asked(self, r, decoding) for r in requests],
                                 deployed=False, context_caches=context_caches,
                                 rescored=rescored, use_cache=use_cache)

    def answer_of(self, ledger: RowLedger, documents: int) -> MechanismAnswer:
        """A decoded response's answer: its ledger, what it spent (:meth:`spent`), one step
        record per released token, and every document used (none at λ = 0)."""
        claim, paid = self.spent(ledger.composed_eps, len(ledger.entries))
        steps = tuple({"token_id": e.token_id, "paid": paid > 0, "eps_step": e.eps,
                       "lam": e.lam, "logp": e.logp_context, "logp_empty": e.logp_empty}
                      for e in ledger.entries)
        return MechanismAnswer(response_ids=tuple(ledger.response_ids),
                               stopped_on_eos=ledger.stopped_on_eos, claim=claim,
                               tokens_paid=paid, steps=steps,
                               documents_used=tuple(range(documents)) if self.lam else (),
                               ledger=ledger)

    def charge(self, decoding: Decoding) -> Charge:
        """Bounded CID: ε per released token (Thm B.1, basic composition); plain CID: no
        guarantee, its ex-post ε the figure an operator may charge (nothing read at λ = 0)."""
        if self.bounded_eps is not None:
            return Charge(per_token=self.bounded_eps,
                          events=((PureDPEvent(self.bounded_eps), 1),))
        return Charge(ex_post=True, reads=self.lam != 0)

    def mode(self) -> str:
        """``bounded`` (an ε per token) or ``lambda`` (plain CID)."""
        return "bounded" if self.bounded_eps is not None else "lambda"

    def batch_key(self, decoding: Decoding) -> Hashable:
        """Every CID answer, whatever its λ, ε, temperature and lengths, decodes in one batch
        with the others that sample (or, apart, those that are greedy)."""
        return self.name, decoding.greedy

    def answer_group(self, lm: LanguageModel, asked: Sequence[Asked],
                     listener: Listener | None = None, *, deployed: bool = True,
                     context_caches: list[Any] | None = None, rescored: bool = False,
                     use_cache: bool = True) -> list[MechanismAnswer]:
        """The answers of CID requests each under its own setting (λ, ε, temperature, lengths;
        all greedy or all sampled), decoded together in one batch with :meth:`answer`'s fast
        paths; each released token announced as it is drawn, and each answer as soon as it
        ends where the engine's floats need no replay. ``deployed`` (as the privacy proxy
        answers): plain CID's ledgers keep each step's ex-post ε, and a served model's server
        samples the answers at λ = 1 and T = 1 without ε itself (plain decoding), released
        unscored, scored with and without the documents by the answer's ``later``; False (as
        the influence run and the canary audit measure): neither."""
        by_server = [k for k, a in enumerate(asked) if deployed and _server_samples(lm, a)]
        out = {k: _server_sampled(lm, asked[k], k, listener) for k in by_server}
        rest = [k for k in range(len(asked)) if k not in out]
        heard: dict[int, list[LedgerEntry]] = {k: [] for k in rest}
        early = listener is not None and not policy_of(lm).invariant
        settings = {k: _cid(asked[k].mechanism).settings(asked[k].decoding, ex_post=deployed)
                    for k in rest}  # once per answer, not per token

        def on_entry(row: int, entry: LedgerEntry) -> None:
            k = rest[row]
            cid, decoded = _cid(asked[k].mechanism), settings[k]
            heard[k].append(entry)
            assert listener is not None
            listener.token(k, entry.token_id,
                           entry.eps if cid.bounded_eps is not None else entry.eps_ex_post)
            stopped = entry.token_id in lm.eos_ids
            if early and (stopped or entry.step + 1 >= decoded.max_new_tokens):
                ledger = ledger_of(heard[k], stopped, decoded)
                listener.done(k, cid.answer_of(ledger, len(asked[k].request.documents)))

        greedy = {asked[k].decoding.greedy for k in rest}
        if len(greedy) > 1:
            raise ValueError("CID answers together are all greedy or all sampled")
        requests = [asked[k].request for k in rest]
        jobs = [(r.prompt(r.documents), r.prompt([]), (_cid(a.mechanism), a.decoding), r.seed)
                for a, r in zip((asked[k] for k in rest), requests)]
        ledgers = _generate_many(lm, jobs, use_cache=use_cache, sample=not greedy.pop(),
                                 ex_post=deployed, context_caches=context_caches, rescored=rescored,
                                 on_entry=None if listener is None else on_entry) if jobs else []
        out.update((k, _cid(asked[k].mechanism).answer_of(ledger, len(r.documents)))
                   for k, r, ledger in zip(rest, requests, ledgers))
        return [out[k] for k in range(len(asked))]

    def figures(self, answer: MechanismAnswer, request: AnswerRequest,
                decoding: Decoding) -> dict[str, Any]:
        """The answer's CID ledger in figures: λ and ε per token asked, ε spent (bounded CID's
        composition), the summed ex-post ε (null where the server sampled the answer), the
        influence (null until a released answer is scored), each step's λ_t and the released
        tokens, the stopping EOS included."""
        ledger = answer.ledger
        assert ledger is not None  # CID's answers carry their ledger
        return {"mode": self.mode(), "lambda": self.lam, "epsilon": self.bounded_eps,
                "epsilon_spent": ledger.composed_eps,
                "epsilon_ex_post": ledger.composed_eps_ex_post,
                "influence": None if answer.later is not None
                else float(sum(e.influence for e in ledger.entries)),
                "lambdas": ledger.lambdas, "token_ids": [e.token_id for e in ledger.entries],
                "tokens": len(ledger.entries), "stopped_on_eos": ledger.stopped_on_eos}

    def streams(self, documents: int, over_datastore: bool) -> int:
        """Two: the prompt holding every document and the prompt without them."""
        return 2


def CIDConfig(lam: float = 1.0, temperature: float = 0.8,  # noqa: N802
              max_new_tokens: int = 50, min_new_tokens: int = 10,
              bounded_eps: float | None = None, lambda_: float | None = None,
              greedy: bool = False) -> tuple[CID, Decoding]:
    """The CID setting a user gives, checked in one place, as CID's mechanism and its decoding
    (the paper's defaults: λ = 1, T = 0.8, 10 to 50 new tokens; ``greedy``: the most likely
    token at each step).

    ``lambda_=`` (the Python API's keyword) sets ``lam``. ``bounded_eps`` switches to bounded
    CID: at each step the largest λ in ``[0, lam]`` whose distribution stays within
    ``bounded_eps / 2`` of the no-context one (App. B, Alg. 1).
    """
    if lambda_ is not None:
        if lam != 1.0:
            raise ConfigError("CIDConfig got both 'lam' and 'lambda_': give only 'lambda_'",
                              param="lambda_")
        lam = float(lambda_)
    _check(lam=lam, temperature=temperature)
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, not {max_new_tokens}",
                          param="max_new_tokens")
    if not 0 <= min_new_tokens <= max_new_tokens:
        raise ConfigError(f"min_new_tokens must be between 0 and the maximum number of new "
                          f"tokens ({max_new_tokens}), not {min_new_tokens}",
                          param="min_new_tokens")
    _check(bounded_eps=bounded_eps)
    # a response's ε composes over its tokens (the stopping EOS included): it must be a number
    if bounded_eps is not None and not math.isfinite(bounded_eps * (max_new_tokens + 1)):
        raise ConfigError(f"bounded_eps {bounded_eps:g} per token composes to more than the "
                          f"largest float over {max_new_tokens + 1} tokens: give a smaller ε",
                          param="bounded_eps")
    return (CID(lam=lam, bounded_eps=bounded_eps),
            Decoding(temperature=temperature, max_new_tokens=max_new_tokens,
                     min_new_tokens=min_new_tokens, greedy=greedy))


def _check(**settings: float | None) -> None:
    """:func:`~ctxleak.kernels.cid.check_cid_settings`, its error a :class:`ConfigError` with
    the same message and parameter."""
    try:
        check_cid_settings(**settings)
    except CIDSettingError as exc:
        raise ConfigError(str(exc), param=exc.param) from None


CIDJob = tuple[Sequence[int], Sequence[int], tuple[CID, Decoding], int]
"""(prompt with the context, prompt without it, CID and its decoding, seed) of one example."""


def _generate_many(lm: LanguageModel, jobs: Sequence[CIDJob], use_cache: bool = True,
                   sample: bool = True, context_caches: list[Any] | None = None,
                   rescored: bool = False,
                   on_entry: Callable[[int, LedgerEntry], None] | None = None,
                   ex_post: bool = False) -> list[RowLedger]:
    """One CID response (its ledger, row k for job k) per job, the two streams of every job
    decoded in one batched KV cache (:func:`~ctxleak.engine.generation.generate_many`); each
    job draws from its own seed, so its response does not depend on the other jobs in the
    batch (nor, under a batch-invariant policy, do its floats). ``context_caches``: a list to
    fill with each job's KV cache of the prompt with the context, prefilled alone, so that
    n-gram scoring need not compute it again. ``rescored``: the caller recomputes the floats by
    scoring each example's streams itself, so the engine need not replay them. ``on_entry``:
    called with (row, ledger entry) as each token is drawn. ``ex_post``: plain CID's ledgers
    keep each step's ex-post ε."""
    decoded = [(full, empty, cid.settings(decoding, ex_post), seed)
               for full, empty, (cid, decoding), seed in jobs]
    ledgers = in_server(lm, decoded, sample, on_entry)
    if ledgers is None:
        keep = context_caches is not None
        parts = [cid_job(full, empty, config, seed, keep, row=k, replay_floats=not rescored,
                          on_entry=on_entry)
                 for k, (full, empty, config, seed) in enumerate(decoded)]
        check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: CID_NEEDS},
                           what="Context Influence Decoding")
        gens = generate_many(lm, [job for job, _ in parts], use_cache=use_cache, sample=sample)
        if context_caches is not None:
            context_caches.extend(gen.prompt_caches.get(0) for gen in gens)
        ledgers = [finish(gen) for (_, finish), gen in zip(parts, gens)]
    elif context_caches is not None:  # no KV cache leaves a server
        context_caches.extend([None] * len(jobs))
    return ledgers


def _cid(mechanism: Mechanism) -> CID:
    """A member of a CID batch (:meth:`CID.batch_key` groups only CID answers)."""
    assert isinstance(mechanism, CID)
    return mechanism


def _server_samples(lm: LanguageModel, asked: Asked) -> bool:
    """Whether the model's server samples the answer itself: λ = 1 and T = 1 without ε is plain
    decoding, which a served model (no weights here) samples on its server, as ``ctxleak
    influence`` has it do at that setting."""
    cid, decoding = _cid(asked.mechanism), asked.decoding
    return cid.lam == 1.0 and cid.bounded_eps is None and not decoding.greedy \
        and decoding.temperature == 1.0 and WEIGHTS not in capabilities_of(lm)


def _server_sampled(lm: LanguageModel, asked: Asked, k: int,
                    listener: Listener | None) -> MechanismAnswer:
    """The answer a served model's server samples (:func:`_server_samples`), released before it
    is scored: its ledger's log-probs and influence NaN, its ``later`` the answer scored
    teacher-forced with and without the documents (Def. 3.1 with n = |D|), EOS masked before
    ``min_new_tokens`` as when it was drawn. Its released tokens are the answer's, the stopping
    EOS as the model's first EOS id."""
    cid, request, decoding = _cid(asked.mechanism), asked.request, asked.decoding
    full, empty = request.prompt(request.documents), request.prompt([])
    [(drawn,)] = sample(lm, [full], [request.seed], temperature=1.0,
                        max_new_tokens=decoding.max_new_tokens,
                        min_new_tokens=decoding.min_new_tokens)
    stopped = drawn.stopped_on_eos
    released = list(drawn.token_ids) + ([lm.eos_ids[0]] if stopped and lm.eos_ids else [])

    def scored() -> MechanismAnswer:
        lc, le = eos_masked(lm, [full, empty], [released, released], decoding.min_new_tokens) \
            if released else [np.zeros(0), np.zeros(0)]
        return cid.answer_of(RowLedger.from_scores(0, released, lc, le, lam=1.0,
                                                   temperature=1.0, stopped_on_eos=stopped),
                             len(request.documents))

    nan = [float("nan")] * len(released)
    answer = replace(cid.answer_of(RowLedger.from_scores(
        0, released, nan, nan, lam=1.0, temperature=1.0, stopped_on_eos=stopped),
        len(request.documents)), later=scored)
    if listener is not None:
        for entry in answer.ledger.entries if answer.ledger else ():
            listener.token(k, entry.token_id, entry.eps_ex_post)
        listener.done(k, answer)
    return answer


__all__ = ["CID", "CIDConfig", "CIDJob", "CID_NEEDS", "bounded_lambda", "cid_combine",
           "cid_logprobs", "cid_route", "ledger_of", "replay_cid"]
