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
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, replace
from typing import Any, ClassVar

import torch

from ctxleak.engine.capabilities import (
    CID_DECODING,
    NEXT_TOKEN_DISTRIBUTION,
    WEIGHTS,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.generation import generate_many, replay
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.pairs import PairJob, pluggable
from ctxleak.engine.served_client import ServerError
from ctxleak.engine.streams import Generation, Share, StreamJob
from ctxleak.errors import ConfigError, warn
from ctxleak.kernels.cid import (
    SEARCH_TOGETHER_ON,
    CIDSettingError,
    bounded_lambda,
    bounded_lambda_rows,
    check_cid_settings,
    cid_logprobs,
)
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger
from ctxleak.mitigations.mechanisms import AnswerRequest, Claim, Decoding, MechanismAnswer
from ctxleak.mitigations.prompts import PromptParts

#: Why CID decoding needs the whole next-token distributions (the words of a refusal).
CID_NEEDS = ("Context Influence Decoding mixes the whole next-token distributions of two "
             "prompts at every step: serve the model with vLLM started with --max-logprobs -1, "
             "or load it in-process")


@dataclass(frozen=True)
class CIDConfig:
    """Decoding settings (the paper's defaults: λ = 1, T = 0.8, 10 to 50 new tokens).

    ``lambda_=`` (the Python API's keyword) sets ``lam``. ``bounded_eps`` switches to bounded
    CID: at each step the largest λ in ``[0, lam]`` whose distribution stays within
    ``bounded_eps / 2`` of the no-context one (App. B, Alg. 1).
    """

    lam: float = 1.0
    temperature: float = 0.8
    max_new_tokens: int = 50
    min_new_tokens: int = 10
    bounded_eps: float | None = None
    lambda_: InitVar[float | None] = None  # the API's spelling of ``lam``

    def __post_init__(self, lambda_: float | None) -> None:
        if lambda_ is not None:
            if self.lam != 1.0:
                raise ConfigError("CIDConfig got both 'lam' and 'lambda_': give only 'lambda_'",
                                  param="lambda_")
            object.__setattr__(self, "lam", float(lambda_))
        _check(lam=self.lam, temperature=self.temperature)
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, not {self.max_new_tokens}",
                              param="max_new_tokens")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ConfigError(f"min_new_tokens must be between 0 and the maximum number of new "
                              f"tokens ({self.max_new_tokens}), not {self.min_new_tokens}",
                              param="min_new_tokens")
        _check(bounded_eps=self.bounded_eps)
        # a response's ε composes over its tokens (the stopping EOS included): it must be a number
        if self.bounded_eps is not None and \
                not math.isfinite(self.bounded_eps * (self.max_new_tokens + 1)):
            raise ConfigError(f"bounded_eps {self.bounded_eps:g} per token composes to more "
                              f"than the largest float over {self.max_new_tokens + 1} tokens: "
                              "give a smaller ε",
                              param="bounded_eps")

    def as_mechanism(self, greedy: bool = False) -> tuple[CID, Decoding]:
        """This setting as CID's mechanism and its decoding settings (``greedy``: the most
        likely token at each step): :meth:`CID.config` of the two is this setting again."""
        return (CID(lam=self.lam, bounded_eps=self.bounded_eps),
                Decoding(temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                         min_new_tokens=self.min_new_tokens, greedy=greedy))

    def ask(self, parts: PromptParts, documents: Sequence[str], seed: int, greedy: bool = False
            ) -> tuple[CID, AnswerRequest, Decoding]:
        """One response asked of this setting's mechanism (:meth:`as_mechanism`) from the
        prompt ``parts`` holding ``documents`` (:meth:`PromptParts.prompt_of`, tokenised once),
        drawn from ``seed``: what :func:`answer_together` takes."""
        cid, decoding = self.as_mechanism(greedy)
        return cid, AnswerRequest(tuple(documents), parts.prompt_of(documents), seed), decoding


@dataclass(frozen=True)
class CID:
    """Context Influence Decoding as a mechanism (Def. 3.4): each response drawn from the
    mixture ``λ·z(y | D, x) + (1−λ)·z(y | x)`` of the prompt holding the request's documents
    and the prompt without them; ``bounded_eps``: bounded CID, each step's λ_t the largest in
    ``[0, lam]`` that keeps the token ε-DP under any replacement of the documents (App. B,
    Alg. 1, Thm B.1). Each answer carries its CID ledger (:class:`RowLedger`)."""

    lam: float = 1.0
    bounded_eps: float | None = None

    name: ClassVar[str] = "cid"
    min_documents: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check(lam=self.lam, bounded_eps=self.bounded_eps)

    def key(self) -> str:
        eps = "" if self.bounded_eps is None else f",bounded_eps={self.bounded_eps:g}"
        return f"cid(lam={self.lam:g}{eps})"

    def describe(self) -> str:
        if self.bounded_eps is not None:
            return f"bounded CID ε = {self.bounded_eps:g} per token (λ ≤ {self.lam:g})"
        return "plain decoding (CID λ = 1)" if self.lam == 1 else f"CID λ = {self.lam:g}"

    def config(self, decoding: Decoding) -> CIDConfig:
        """These settings with ``decoding``'s temperature and lengths."""
        return CIDConfig(lam=self.lam, temperature=decoding.temperature,
                         max_new_tokens=decoding.max_new_tokens,
                         min_new_tokens=decoding.min_new_tokens, bounded_eps=self.bounded_eps)

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

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding, *, context_caches: list[Any] | None = None,
               rescored: bool = False,
               on_entry: Callable[[int, LedgerEntry], None] | None = None
               ) -> list[MechanismAnswer]:
        """One CID response per request, the prompt with all its documents against the prompt
        without any, all requests in one batched KV cache (or inside vLLM with ctxleak's
        plugin); CID's fast paths as :func:`generate_cid_many` has them (``context_caches``,
        ``rescored``, ``on_entry``)."""
        return answer_together(lm, [(self, r, decoding) for r in requests],
                               context_caches=context_caches, rescored=rescored,
                               on_entry=on_entry)

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

    # -- the Mechanism protocol's words with a default, as CID answers them ---------------------

    def documents_needed(self) -> int:
        return self.min_documents

    def streams(self, documents: int, over_datastore: bool) -> int:
        """Two: the prompt holding every document and the prompt without them."""
        return 2

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> None:
        """None: CID's loss of a document is its influence reading, the run's own measure."""
        return None


def answer_together(lm: LanguageModel, asked: Sequence[tuple[CID, AnswerRequest, Decoding]], *,
                    context_caches: list[Any] | None = None, rescored: bool = False,
                    on_entry: Callable[[int, LedgerEntry], None] | None = None
                    ) -> list[MechanismAnswer]:
    """:meth:`CID.answer` of requests each under its own CID setting and decoding (λ, ε,
    temperature, lengths; all greedy or all sampled), decoded together in one batch, as the
    privacy proxy decodes the answers of concurrent clients; ``on_entry(k, entry)`` hears
    request k's entries as they are drawn."""
    greedy = {decoding.greedy for _, _, decoding in asked}
    if len(greedy) > 1:
        raise ValueError("answer_together: the requests must be all greedy or all sampled")
    jobs = [(r.prompt(r.documents), r.prompt([]), cid.config(decoding), r.seed)
            for cid, r, decoding in asked]
    ledgers = generate_cid_many(lm, jobs, sample=not greedy.pop(), context_caches=context_caches,
                                rescored=rescored, on_entry=on_entry) if jobs else []
    return [cid.answer_of(ledger, len(r.documents))
            for ledger, (cid, r, _) in zip(ledgers, asked)]


def _check(**settings: float | None) -> None:
    """:func:`~ctxleak.kernels.cid.check_cid_settings`, its error a :class:`ConfigError` with
    the same message and parameter."""
    try:
        check_cid_settings(**settings)
    except CIDSettingError as exc:
        raise ConfigError(str(exc), param=exc.param) from None


def cid_lambda(z_context: torch.Tensor, z_empty: torch.Tensor, config: CIDConfig
               ) -> tuple[float, float | None]:
    """The λ of one decoding step and, for bounded CID, its ex-post ε: ``config.lam`` (plain
    CID), or Alg. 1's λ_t (:func:`bounded_lambda` at ``config.temperature``, App. B)
    with 2·max_y |log p̄_λ(y|D) − log p(y|∅)|, a figure about this context alone."""
    if config.bounded_eps is None:
        return config.lam, None
    lam, div = bounded_lambda(z_context, z_empty, config.bounded_eps, config.lam,
                              config.temperature)
    return lam, 2.0 * div


def cid_combine(z_context: torch.Tensor, z_empty: torch.Tensor, config: CIDConfig, *,
                temperature: float | None = None) -> tuple[torch.Tensor, float, float | None]:
    """One step of CID (Def. 3.4; bounded: App. B, Alg. 1): the step's λ and ex-post
    ε (:func:`cid_lambda`) and the mixture ``log p̄_λ`` (:func:`cid_logprobs`) at
    ``temperature`` (default ``config.temperature``; a logits processor returns T = 1 and
    leaves T to ``generate``'s warper). ``z_context``/``z_empty`` are one step's logits, ``[V]``;
    plain CID also takes ``[rows, V]`` (one λ for all rows)."""
    lam, eps_ex_post = cid_lambda(z_context, z_empty, config)
    t = config.temperature if temperature is None else temperature
    return cid_logprobs(z_context, z_empty, lam, t), lam, eps_ex_post


def generate_cid(lm: LanguageModel, prompt_context: Sequence[int], prompt_empty: Sequence[int],
                 config: CIDConfig, seed: int, use_cache: bool = True,
                 sample: bool = True, on_entry: Callable[[LedgerEntry], None] | None = None
                 ) -> RowLedger:
    """Draw one response by CID from the prompt with the context and the one without it
    (``sample=False``: the most likely token of ``p̄_λ`` at each step, greedy CID).
    ``on_entry``: called with each token's ledger entry as the token is drawn (the stopping EOS
    too), in order, before the response is finished: what streams it."""
    return generate_cid_many(lm, [(prompt_context, prompt_empty, config, seed)],
                             use_cache=use_cache, sample=sample,
                             on_entry=None if on_entry is None else lambda _row, e: on_entry(e)
                             )[0]


CIDJob = tuple[Sequence[int], Sequence[int], CIDConfig, int]
"""(prompt with the context, prompt without it, decoding settings, seed) of one example."""


def generate_cid_many(lm: LanguageModel, jobs: Sequence[CIDJob], use_cache: bool = True,
                      sample: bool = True, context_caches: list[Any] | None = None,
                      rescored: bool = False,
                      on_entry: Callable[[int, LedgerEntry], None] | None = None
                      ) -> list[RowLedger]:
    """One CID response (its ledger, row k for job k) per job, the two streams of every job
    decoded in one batched KV cache (:func:`~ctxleak.engine.generation.generate_many`); each
    job draws from its own seed, so its response does not depend on the other jobs in the
    batch (nor, under a batch-invariant policy, do its floats). ``context_caches``: a list to
    fill with each job's KV cache of the prompt with the context, prefilled alone, so that
    n-gram scoring need not compute it again. ``rescored``: the caller recomputes the floats by
    scoring each example's streams itself, so the engine need not replay them. ``on_entry``:
    called with (row, ledger entry) as each token is drawn."""
    in_server = _in_server(lm, jobs, sample, on_entry)
    if in_server is not None:
        if context_caches is not None:  # no KV cache leaves a server
            context_caches.extend([None] * len(jobs))
        return in_server
    keep = context_caches is not None
    parts = [_cid_job(full, empty, config, seed, keep, row=k, replay_floats=not rescored,
                      on_entry=on_entry)
             for k, (full, empty, config, seed) in enumerate(jobs)]
    check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: CID_NEEDS},
                       what="Context Influence Decoding")
    gens = generate_many(lm, [job for job, _ in parts], use_cache=use_cache, sample=sample)
    if context_caches is not None:
        context_caches.extend(gen.prompt_caches.get(0) for gen in gens)
    return [finish(gen) for (_, finish), gen in zip(parts, gens)]


def cid_route(lm: LanguageModel) -> str:
    """Where ``lm`` decodes CID, in the words of a start line."""
    caps = capabilities_of(lm)
    if WEIGHTS in caps:
        return "CID decodes in this process"
    if CID_DECODING in caps:
        return "CID decodes inside vLLM (ctxleak's plugin)"
    return ("CID decodes by whole next-token distributions, one request per stream and token "
            "(the server has no ctxleak CID plugin: slow)")


def _in_server(lm: LanguageModel, jobs: Sequence[CIDJob], sample: bool,
               on_entry: Callable[[int, LedgerEntry], None] | None) -> list[RowLedger] | None:
    """The answers decoded by the model's server itself (:data:`CID_DECODING`), or None where
    it cannot (no plugin, a setting it does not take, answers it could not keep in step: said
    in one warning) and the steps go through ctxleak's own loop."""
    caps = capabilities_of(lm)
    if WEIGHTS in caps or not jobs:
        return None
    if CID_DECODING not in caps:
        warn(f"{lm.describe()} has no ctxleak CID plugin: CID decodes by whole next-token "
             "distributions, one request per stream and token (slow); see 'Served models' "
             "in the docs for the plugin")
        return None
    if not all(pluggable(c.lam, c.bounded_eps) for _, _, c, _ in jobs):
        return None
    pair_jobs = [PairJob(tuple(full), tuple(empty), c.lam, c.temperature, c.bounded_eps,
                         c.max_new_tokens, c.min_new_tokens, seed, greedy=not sample)
                 for full, empty, c, seed in jobs]
    try:
        answers = lm.decode_pairs(pair_jobs)
    except ServerError as exc:
        warn(f"{exc}: these answers decode by whole next-token distributions instead")
        return None
    # the same entries as ctxleak's own loop
    out = [ledger_of(answer.steps, answer.stopped_on_eos, config, row=k)
           for k, (answer, (_, _, config, _)) in enumerate(zip(answers, jobs))]
    if on_entry is not None:
        for ledger in out:
            for entry in ledger.entries:
                on_entry(ledger.row, entry)
    return out


def ledger_of(entries: Sequence[LedgerEntry], stopped_on_eos: bool, config: CIDConfig, *,
              row: int = 0) -> RowLedger:
    """The ledger of a response decoded by CID under ``config`` from its released tokens'
    ``entries`` (the stopping EOS included when it ``stopped_on_eos``): every CID ledger ctxleak
    decodes is made here (in-process, by the plugin, token by token in the proxy)."""
    return RowLedger(row=row, entries=tuple(entries), stopped_on_eos=stopped_on_eos,
                     lam=config.lam, temperature=config.temperature,
                     bounded_eps=config.bounded_eps)


def replay_cid(lm: LanguageModel, prompt_context: Sequence[int], prompt_empty: Sequence[int],
               config: CIDConfig, response: RowLedger) -> RowLedger:
    """``response`` with its floats (log-probs, λ_t and ε of bounded CID) recomputed from this
    example's two prompts alone (:func:`ctxleak.engine.generation.replay`, what a
    batch-invariant run does): the same tokens, and numbers that do not depend on the examples
    decoded with it."""
    job, finish = _cid_job(prompt_context, prompt_empty, config, 0, row=response.row)
    gen = Generation(token_ids=response.response_ids, stopped_on_eos=response.stopped_on_eos)
    again = finish(replay(lm, job, gen))
    if not response.stopped_on_eos:
        return again
    # the replay draws the first EOS id: the ledger keeps the one the generation drew
    eos = replace(again.entries[-1], token_id=response.entries[-1].token_id)
    return replace(again, entries=again.entries[:-1] + (eos,))


def _cid_job(prompt_context: Sequence[int], prompt_empty: Sequence[int], config: CIDConfig,
             seed: int, keep_context_cache: bool = False, row: int = 0,
             replay_floats: bool = True,
             on_entry: Callable[[int, LedgerEntry], None] | None = None
             ) -> tuple[StreamJob, Callable[[Generation], RowLedger]]:
    """The stream job of one CID response and the function that reads its ledger. Each step's
    record is its :class:`LedgerEntry`: the drawn token, λ_t, log p̄_λ(y_t), log p(y_t | ∅) and,
    for bounded CID, ε and the ex-post ε_t. ``on_entry(row, entry)`` hears each drawn token's
    entry once, as it is drawn: a replay of the floats observes the same steps again unheard."""
    chosen: dict[str, Any] = {}  # λ_t and ex-post ε_t of the current step, combine to observe
    heard = [0]  # entries already handed to on_entry
    searched: dict[int, tuple[float, float]] = {}  # step -> bounded λ_t found with other jobs'

    def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()) -> torch.Tensor:
        # masked EOS (``excluded``) stays at MASKED_LOGIT in the λ-mix: probability 0
        found = searched.pop(step, None)
        if found is None:
            logprobs, chosen["lam"], chosen["eps"] = cid_combine(logits[0], logits[1], config)
            return logprobs
        chosen["lam"], chosen["eps"] = found[0], 2.0 * found[1]  # as cid_lambda gives them
        return cid_logprobs(logits[0], logits[1], found[0], config.temperature)

    def observe(logits: torch.Tensor, logprobs: torch.Tensor, token: int, step: int
                ) -> LedgerEntry:
        empty = torch.log_softmax(logits[1] / config.temperature, dim=-1)
        lc, le = float(logprobs[token]), float(empty[token])
        entry = LedgerEntry(step=step, token_id=int(token), lam=chosen["lam"], logp_context=lc,
                            logp_empty=le, eps=config.bounded_eps, eps_ex_post=chosen["eps"])
        if on_entry is not None and step == heard[0]:
            heard[0] += 1
            on_entry(row, entry)
        return entry

    def finish(gen: Generation) -> RowLedger:
        return ledger_of(gen.records, gen.stopped_on_eos, config, row=row)

    job = StreamJob([list(prompt_context), list(prompt_empty)], combine, observe, seed,
                    config.max_new_tokens, config.min_new_tokens,
                    keep_prompt_cache=(0,) if keep_context_cache else (), replay=replay_floats,
                    share=_shared_search(config, searched.__setitem__))
    return job, finish


def _shared_search(config: CIDConfig, receive: Callable[[int, Any], None]) -> Share | None:
    """Bounded CID's λ_t search, shared by the answers of a step with the same ε, λ_max and T
    where :data:`~ctxleak.kernels.cid.SEARCH_TOGETHER_ON` says (a GPU): each answer's
    (λ_t, divergence) are the floats of its own search (:func:`bounded_lambda_rows`)."""
    eps = config.bounded_eps
    if eps is None:
        return None

    def compute(rows: list[torch.Tensor]) -> list[tuple[float, float]]:
        return bounded_lambda_rows([r[0] for r in rows], [r[1] for r in rows], eps, config.lam,
                                   config.temperature)

    return Share(("bounded CID", eps, config.lam, config.temperature), compute, receive,
                 SEARCH_TOGETHER_ON)
