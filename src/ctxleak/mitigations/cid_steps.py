"""The steps of one Context Influence Decoding answer (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4; bounded: App. B, Alg. 1), apart from the
mechanism that asks for them (:mod:`ctxleak.mitigations.cid`): each step's λ and mixture, the
stream job that draws an answer in the engine's batched loop, its ledger, and the replay of its
floats. Everything here reads a response's settings through :class:`CIDSettings`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ctxleak.engine.capabilities import CID_DECODING, WEIGHTS, capabilities_of
from ctxleak.engine.generation import replay
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.pairs import PairJob, pluggable
from ctxleak.engine.served_client import ServerError
from ctxleak.engine.streams import Generation, Share, StreamJob
from ctxleak.errors import warn
from ctxleak.kernels.cid import (
    SEARCH_TOGETHER_ON,
    bounded_lambda,
    bounded_lambda_rows,
    cid_logprobs,
    divergence_at,
)
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger

#: Why CID decoding needs the whole next-token distributions (the words of a refusal).
CID_NEEDS = ("Context Influence Decoding mixes the whole next-token distributions of two "
             "prompts at every step: serve the model with vLLM started with --max-logprobs -1, "
             "or load it in-process")


@dataclass(frozen=True)
class CIDSettings:
    """The settings one CID response decodes under, read by every step here: a
    :class:`~ctxleak.mitigations.cid.CID`'s λ (bounded CID's cap on λ_t) and ε per token (None:
    plain CID) with a :class:`~ctxleak.mitigations.mechanisms.Decoding`'s temperature and
    new-token limits (:meth:`CID.settings <ctxleak.mitigations.cid.CID.settings>` makes them;
    those two types check what a user gives); ``ex_post``: plain CID also records each step's
    ex-post ε (:func:`~ctxleak.kernels.cid.divergence_at`, a figure, not a guarantee), which a
    deployment that charges it needs (bounded CID always records it)."""

    lam: float
    temperature: float
    max_new_tokens: int
    min_new_tokens: int
    bounded_eps: float | None
    ex_post: bool = False


SettingsJob = tuple[Sequence[int], Sequence[int], CIDSettings, int]
"""(prompt with the context, prompt without it, decoding settings, seed) of one example."""


def cid_combine(z_context: torch.Tensor, z_empty: torch.Tensor, config: CIDSettings, *,
                temperature: float | None = None) -> tuple[torch.Tensor, float, float | None]:
    """One step of CID (Def. 3.4; bounded: App. B, Alg. 1): the mixture ``log p̄_λ``
    (:func:`cid_logprobs`) at ``temperature`` (default ``config.temperature``; a logits
    processor returns T = 1 and leaves T to ``generate``'s warper), the step's λ and, for
    bounded CID (and plain CID with ``config.ex_post``), its ex-post ε: ``config.lam`` (plain
    CID), or Alg. 1's λ_t (:func:`bounded_lambda` at ``config.temperature``, App. B), with
    2·max_y |log p̄_λ(y|D) − log p(y|∅)| at that λ, a figure about this context alone.
    ``z_context``/``z_empty`` are one step's logits, ``[V]``; plain CID without ``ex_post`` also
    takes ``[rows, V]`` (one λ for all rows)."""
    lam, eps_ex_post = config.lam, None  # plain CID
    if config.bounded_eps is not None:
        lam, div = bounded_lambda(z_context, z_empty, config.bounded_eps, config.lam,
                                  config.temperature)
        eps_ex_post = 2.0 * div
    elif config.ex_post:
        eps_ex_post = 2.0 * divergence_at(z_context, z_empty, lam, config.temperature)
    t = config.temperature if temperature is None else temperature
    return cid_logprobs(z_context, z_empty, lam, t), lam, eps_ex_post


def ledger_of(entries: Sequence[LedgerEntry], stopped_on_eos: bool, config: CIDSettings, *,
              row: int = 0) -> RowLedger:
    """The ledger of a response decoded by CID under ``config`` from its released tokens'
    ``entries`` (the stopping EOS included when it ``stopped_on_eos``): every CID ledger ctxleak
    decodes is made here (in-process, by the plugin, token by token in the proxy)."""
    return RowLedger(row=row, entries=tuple(entries), stopped_on_eos=stopped_on_eos,
                     lam=config.lam, temperature=config.temperature,
                     bounded_eps=config.bounded_eps)


def replay_cid(lm: LanguageModel, prompt_context: Sequence[int], prompt_empty: Sequence[int],
               config: CIDSettings, response: RowLedger) -> RowLedger:
    """``response`` with its floats (log-probs, λ_t and ε of bounded CID) recomputed from this
    example's two prompts alone (:func:`ctxleak.engine.generation.replay`, what a
    batch-invariant run does): the same tokens, and numbers that do not depend on the examples
    decoded with it."""
    job, finish = cid_job(prompt_context, prompt_empty, config, 0, row=response.row)
    gen = Generation(token_ids=response.response_ids, stopped_on_eos=response.stopped_on_eos)
    again = finish(replay(lm, job, gen))
    if not response.stopped_on_eos:
        return again
    # the replay draws the first EOS id: the ledger keeps the one the generation drew
    eos = replace(again.entries[-1], token_id=response.entries[-1].token_id)
    return replace(again, entries=again.entries[:-1] + (eos,))


def cid_job(prompt_context: Sequence[int], prompt_empty: Sequence[int], config: CIDSettings,
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
        chosen["lam"], chosen["eps"] = found[0], 2.0 * found[1]  # as cid_combine gives them
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


def _shared_search(config: CIDSettings, receive: Callable[[int, Any], None]) -> Share | None:
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

def cid_route(lm: LanguageModel) -> str:
    """Where ``lm`` decodes CID, in the words of a start line."""
    caps = capabilities_of(lm)
    if WEIGHTS in caps:
        return "CID decodes in this process"
    if CID_DECODING in caps:
        return "CID decodes inside vLLM (ctxleak's plugin)"
    return ("CID decodes by whole next-token distributions, one request per stream and token "
            "(the server has no ctxleak CID plugin: slow)")


def in_server(lm: LanguageModel, jobs: Sequence[SettingsJob], sample: bool,
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
                         c.max_new_tokens, c.min_new_tokens, seed, greedy=not sample,
                         ex_post=c.ex_post)
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


__all__ = ["CID_NEEDS", "CIDSettings", "SettingsJob", "cid_combine", "cid_job", "cid_route",
           "in_server", "ledger_of", "replay_cid"]
