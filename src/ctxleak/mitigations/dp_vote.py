"""DPVoteRAG and DPSparseVoteRAG ("Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy", Koga, Wu and Chaudhuri) as :class:`~ctxleak.mitigations.mechanisms.Mechanism`
s decoded by the engine.

The voters read their shards of the datastore, or of the request's retrieved list, as
:mod:`~ctxleak.mitigations.sharded` says (with the relation each claim then covers). Each
voter's documents make one prompt; a last stream holds the prompt without retrieval. At every step each
voter votes its most likely next token (each step's record keeps every voter's vote, ``votes``)
and :func:`~ctxleak.kernels.vote.limited_domain` releases the winner, or abstains (⊥).

- :class:`DPVote` (DPVoteRAG): every step is a paid vote of ``(eps_token, δ/T)``; ``T`` votes
  at most, ``T·eps_token ≤ eps`` by basic composition.
- :class:`DPSparseVote` (DPSparseVoteRAG): a sparse-vector test first asks whether enough
  voters (``threshold``, a fraction of them, noisily) agree with the no-retrieval model's most
  likely token; if so that token is released and nothing is paid; otherwise a vote is paid
  (``eps_svt`` for the test's round and ``eps_token`` for the vote). ``c`` paid votes at most,
  ``c·(eps_svt + eps_token) ≤ eps``. Each step record of a round carries it (``round``); a
  round's ``eps_svt`` is recorded on the step that opens it, the vote's ``eps_token`` on the
  step that pays, so the steps' ε add up to what the answer spent, a round still open when it
  ends included (:attr:`~ctxleak.mitigations.mechanisms.MechanismAnswer.rounds_opened`).

After an abstention, and once the budget is spent, the mechanism releases the no-retrieval
token (``abstain="no-retrieval"``, the default: a function of public data and of what was
already released, so it costs nothing) or stops the response as the paper does
(``abstain="stop"``). Noise is drawn from the request's seed and the step (and the
sparse-vector round), so a step run again draws the same noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch

from ctxleak.engine.capabilities import NEXT_TOKEN_DISTRIBUTION, check_capabilities
from ctxleak.engine.generation import generate_many
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.streams import Generation, StreamJob
from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import (
    ABSTAIN,
    laplace,
    limited_domain,
    limited_domain_gap,
    svt_pays,
    vote_counts,
    vote_scale,
    voter_tokens,
)
from ctxleak.mitigations.document_loss import DocumentLoss, vote_loss
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    MechanismAnswer,
    refuse_greedy,
)
from ctxleak.mitigations.sharded import ShardedVoters

#: What the mechanisms do when the vote abstains or the budget is spent.
ABSTAIN_MODES = ("no-retrieval", "stop")

# -- shared by the DP mechanisms (the vote and DP-RAG) ------------------------------------------


#: The smallest ε a mechanism takes: below it the claim's arithmetic (a Rényi composition's
#: conversion, subnormal floats) rounds the guarantee to 0, and an answer would be charged
#: nothing for what it spent.
MIN_EPS = 1e-9


def check_eps(value: float, param: str = "eps") -> None:
    """``value`` a finite ε of at least :data:`MIN_EPS`, else a one-line
    :class:`ConfigError` naming ``param``."""
    if isinstance(value, bool) or not (isinstance(value, (int, float))
                                       and math.isfinite(value) and value >= MIN_EPS):
        raise ConfigError(f"{param}: {value} is not a finite ε ≥ {MIN_EPS:g}", param=param)


def check_delta(value: float, param: str = "delta") -> None:
    """``value`` a δ in (0, 1), else a one-line :class:`ConfigError` naming ``param``."""
    if not (isinstance(value, (int, float)) and 0 < value < 1):
        raise ConfigError(f"{param}: {value} is not a δ in (0, 1)", param=param)


def noise_generator(seed: int, tag: int, index: int) -> torch.Generator:
    """The CPU generator of one draw site: (the response's seed, what draws, step or round),
    so the same step of the same response draws the same noise whenever it is run."""
    seed = int(seed) & ((1 << 64) - 1)
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, int(tag), int(index)])
    return torch.Generator(device="cpu").manual_seed(int(state.generate_state(1, np.uint64)[0])
                                                     & ((1 << 63) - 1))


def one_hot_logprobs(token: int, vocab: int) -> torch.Tensor:
    """The log-probabilities of releasing ``token`` for sure (the engine's draw takes it)."""
    out = torch.full((vocab,), -math.inf, dtype=torch.float64)
    out[token] = 0.0
    return out


def decode_jobs(lm: LanguageModel, jobs: Sequence[StreamJob], what: str) -> list[Generation]:
    """The jobs decoded together (:func:`~ctxleak.engine.generation.generate_many`): the
    mechanisms read whole next-token distributions at every step."""
    check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: f"{what} reads every stream's whole "
                            "next-token distribution at each step: load the model in-process "
                            "or serve it with vLLM started with --max-logprobs -1"}, what=what)
    return generate_many(lm, jobs, sample=True)


def finish_answer(gen: Generation, claim: Claim, used: Sequence[int],
                  read: Sequence[str] = ()) -> MechanismAnswer:
    """A decoded job as a :class:`MechanismAnswer` (its step records say which steps paid):
    ``used`` the request's documents that reached a prompt, ``read`` the datastore's ids."""
    steps = tuple(gen.records)
    return MechanismAnswer(response_ids=tuple(gen.token_ids), stopped_on_eos=gen.stopped_on_eos,
                           claim=claim, tokens_paid=sum(1 for s in steps if s["paid"]),
                           steps=steps, documents_used=tuple(used),
                           datastore_used=tuple(dict.fromkeys(read)))


# -- the vote ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VoteBudget:
    """What one response may spend: ``votes`` paid votes at most, each ``(eps_token,
    delta_step)`` (plus ``eps_svt`` for its sparse-vector round), and the composed claim."""

    votes: int
    eps_token: float
    delta_step: float
    eps_svt: float
    claim: Claim


def _check_vote(mech: Any) -> None:
    check_eps(mech.eps)
    check_delta(mech.delta)
    if isinstance(mech.shards, bool) or not (isinstance(mech.shards, int) and mech.shards >= 3):
        raise ConfigError(f"shards: a vote needs at least 3 voters (a released token leads the "
                          f"next by more than 2 votes), not {mech.shards}", param="shards")
    if mech.eps_token is not None:
        check_eps(mech.eps_token, "eps_token")
    if isinstance(mech.domain, bool) or not (isinstance(mech.domain, int) and mech.domain >= 1):
        raise ConfigError(f"domain: the limited domain holds at least 1 token, not "
                          f"{mech.domain}", param="domain")
    if isinstance(mech.per_voter, bool) or not (isinstance(mech.per_voter, int) and mech.per_voter >= 1):
        raise ConfigError(f"per_voter: each voter reads at least 1 document of its shard, not "
                          f"{mech.per_voter}", param="per_voter")
    if mech.abstain not in ABSTAIN_MODES:
        raise ConfigError(f"abstain: '{mech.abstain}' is not one of {', '.join(ABSTAIN_MODES)}",
                          param="abstain")


def _budget(votes: int, eps_token: float, eps_svt: float, delta: float, param: str
            ) -> VoteBudget:
    if votes < 1:
        raise ConfigError(f"{param}: one paid token ({eps_token + eps_svt:g}) already costs "
                          "more than eps", param=param)
    delta_step = delta / votes
    try:
        vote_scale(eps_token, delta_step)
    except ValueError as exc:
        raise ConfigError(f"eps_token: {exc}", param="eps_token") from None
    # basic composition: the ε and δ of the votes (and rounds) add up
    claim = Claim(eps=votes * (eps_token + eps_svt), delta=votes * delta_step, relation="shard")
    return VoteBudget(votes, eps_token, delta_step, eps_svt, claim)


def _vote_job(mech: Any, lm: LanguageModel, request: AnswerRequest, decoding: Decoding,
              budget: VoteBudget, voters: list[list[str]]) -> StreamJob:
    """The stream job of one response: ``shards`` voter streams and the no-retrieval stream;
    ``combine`` takes the step's decision (:func:`_decide`), ``observe`` records it."""
    m, sparse = mech.shards, mech.svt_threshold() is not None
    scale, gap = mech.noise(budget)
    if mech.abstain == "stop" and not lm.eos_ids:
        raise ConfigError(f"{lm.describe()} has no end-of-sequence token: abstain='stop' cannot "
                          "end a response", param="abstain")
    stop = int(lm.eos_ids[0]) if mech.abstain == "stop" else None  # what ends a response
    state: dict[str, Any] = {}

    def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()) -> torch.Tensor:
        if step == 0:  # a response (or its replay) starts: no vote paid, no round open
            state.update(paid=0, rho=None)
        votes = voter_tokens(logits[:m])
        counts = vote_counts(votes, logits.shape[-1])
        empty = int(torch.argmax(logits[m]))
        record = {"no_retrieval_token": empty, "votes": votes.tolist(),
                  "agree": int(counts[empty]), "top_votes": int(counts.max()), "paid": False,
                  "eps_step": 0.0, "delta_step": 0.0, "gap": gap}
        token = _decide(mech, budget, state, counts, empty, step, scale, gap, record,
                        sparse=sparse, seed=request.seed)
        if token is None:  # abstained or spent
            token = empty if stop is None else stop
        state["record"] = record
        return one_hot_logprobs(token, logits.shape[-1])

    def observe(logits: torch.Tensor, logprobs: torch.Tensor, token: int, step: int
                ) -> dict[str, Any]:
        lp = torch.log_softmax(logits[m].double() / decoding.temperature, dim=-1)
        return {"step": step, "token_id": int(token), "logp_empty": float(lp[token]),
                **state["record"]}

    new, least = mech.new_tokens(decoding, budget)
    prompts = [list(request.prompt(texts)) for texts in voters] + [list(request.prompt([]))]
    return StreamJob(prompts, combine, observe, request.seed, new, least, replay=False)


def _decide(mech: Any, budget: VoteBudget, state: dict[str, Any], counts: torch.Tensor,
            empty: int, step: int, scale: float, gap: float, record: dict[str, Any], *,
            sparse: bool, seed: int) -> int | None:
    """One step's released token (None: abstained, or the budget is spent), ``record`` filled
    with what it paid. The vote: a paid limited-domain step while votes remain; the sparse
    vote: a sparse-vector test first (free when it lets the no-retrieval token through)."""
    if state["paid"] >= budget.votes:
        record["source"] = "budget spent"
        return None
    generator = noise_generator(seed, 0, step)
    if sparse:
        # each step of a round records it; the round's ε_svt is spent (and recorded) on the
        # step that opens it, when its threshold's noise is drawn, paid or not
        record["round"] = state["paid"]
        if state["rho"] is None:  # a new round: its threshold's noise
            state["rho"] = float(laplace(1, 2.0 / budget.eps_svt,
                                         noise_generator(seed, 1, state["paid"]))[0])
            record["eps_step"] = budget.eps_svt
        if not mech.pays(float(counts[empty]), budget.eps_svt, generator, state["rho"]):
            record["source"] = "no-retrieval (free)"
            return empty
        state["rho"] = None  # the round ends on its first paid step
    state["paid"] += 1
    record.update(paid=True, eps_step=record["eps_step"] + budget.eps_token,
                  delta_step=budget.delta_step)
    token = mech.release(counts, scale, gap, generator)
    record["source"] = "vote" if token != ABSTAIN else "abstained"
    return None if token == ABSTAIN else token


class _Voting(ShardedVoters):
    """What the two votes share beyond their voters (:class:`ShardedVoters`): the claim and the
    answer of their budget, and the noisy steps as methods (a test's broken variant overrides
    them)."""

    domain: int
    abstain: str

    def budget(self, decoding: Decoding) -> VoteBudget:
        raise NotImplementedError  # each vote writes its own

    def claim(self, decoding: Decoding) -> Claim:
        return self.budget(decoding).claim

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        refuse_greedy(self, decoding)
        budget = self.budget(decoding)
        voters = [self.voter_documents(r) for r in requests]
        jobs = [_vote_job(self, lm, r, decoding, budget, texts)
                for r, (texts, _) in zip(requests, voters)]
        gens = decode_jobs(lm, jobs, what=f"the {self.name} mechanism")
        over_store = replace(budget.claim, relation="document")
        return [finish_answer(g, budget.claim, range(len(r.documents))) if r.datastore is None
                else finish_answer(g, over_store, (), read)
                for g, r, (_, read) in zip(gens, requests, voters)]

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> list[DocumentLoss]:
        """Each document's loss through its voter (:func:`~.document_loss.vote_loss`)."""
        return [vote_loss(self, lm, request, answer, d, decoding) for d in documents]

    def svt_threshold(self) -> float | None:
        """The sparse-vector test's threshold, in votes; None: no test, every step a vote."""
        return None

    def noise(self, budget: VoteBudget) -> tuple[float, float]:
        """The limited-domain step's Gumbel scale and threshold gap (votes) at the budget's
        per-vote ``(eps_token, delta_step)``."""
        scale = vote_scale(budget.eps_token, budget.delta_step)
        return scale, limited_domain_gap(scale, budget.delta_step, self.domain)

    def new_tokens(self, decoding: Decoding, budget: VoteBudget) -> tuple[int, int]:
        """The most and the fewest new tokens a response is decoded for: a plain vote that
        stops at ⊥ or a spent budget stops after its paid votes at most; EOS masked before the
        fewest."""
        new = decoding.max_new_tokens
        if self.abstain == "stop" and self.svt_threshold() is None:
            new = min(new, budget.votes)
        return new, min(decoding.min_new_tokens, new)

    def release(self, counts: torch.Tensor, scale: float, gap: float,
                generator: torch.Generator) -> int:
        """The limited-domain step (:func:`~ctxleak.kernels.vote.limited_domain`)."""
        return limited_domain(counts, scale, gap, self.domain, generator)


@dataclass(frozen=True)
class DPVote(_Voting):
    """DPVoteRAG: ``shards`` voters, every released token a paid limited-domain vote of
    ``eps_token`` (default ``eps / min(max_new_tokens, 10)``); ``eps`` and ``delta``: the
    whole response's budget (relation "document" over a request's datastore, "shard" over its
    retrieved list); ``domain``: the limited domain's size k̄; ``abstain``: what ⊥ and a spent
    budget release; ``per_voter``: the documents each voter retrieves from its shard of a
    datastore (module docstring)."""

    name: ClassVar[str] = "dp-vote"

    eps: float
    shards: int
    delta: float = 1e-4
    eps_token: float | None = None
    domain: int = 1
    abstain: str = "no-retrieval"
    per_voter: int = 1

    def __post_init__(self) -> None:
        _check_vote(self)

    def key(self) -> str:
        return (f"dp-vote(eps={self.eps:g},shards={self.shards},delta={self.delta:g}"
                f"{_extras(self)})")

    def budget(self, decoding: Decoding) -> VoteBudget:
        """The votes a response may pay for and the composed claim."""
        per = self.eps_token or self.eps / min(decoding.max_new_tokens, 10)
        votes = min(decoding.max_new_tokens, math.floor(self.eps / per * (1 + 1e-12)))
        return _budget(votes, per, 0.0, self.delta, "eps_token")


@dataclass(frozen=True)
class DPSparseVote(_Voting):
    """DPSparseVoteRAG: the no-retrieval token released free while at least ``threshold`` (a
    fraction of the voters, noisily) agree with it; otherwise a paid vote of ``eps_token``
    plus ``eps_svt`` for the sparse-vector round (each default ``eps / 6``: three paid
    tokens); ``eps`` and ``delta``: the whole response's budget (relations as
    :class:`DPVote`'s)."""

    name: ClassVar[str] = "dp-sparse-vote"

    eps: float
    shards: int
    threshold: float = 0.5
    delta: float = 1e-4
    eps_token: float | None = None
    eps_svt: float | None = None
    domain: int = 1
    abstain: str = "no-retrieval"
    per_voter: int = 1

    def __post_init__(self) -> None:
        _check_vote(self)
        if self.eps_svt is not None:
            check_eps(self.eps_svt, "eps_svt")
        if isinstance(self.threshold, bool) or not (isinstance(self.threshold, (int, float))
                                                   and 0 < self.threshold <= 1):
            raise ConfigError(f"threshold: {self.threshold} is not a fraction of the voters in "
                              "(0, 1]", param="threshold")

    def pays(self, agree: float, eps_svt: float, generator: torch.Generator, rho: float
             ) -> bool:
        """The sparse-vector test (:func:`~ctxleak.kernels.vote.svt_pays`) of ``agree``
        voters against ``threshold`` of them."""
        return svt_pays(agree, self.threshold * self.shards, eps_svt, generator, rho)

    def svt_threshold(self) -> float | None:
        return self.threshold * self.shards

    def key(self) -> str:
        return (f"dp-sparse-vote(eps={self.eps:g},shards={self.shards},"
                f"threshold={self.threshold:g},delta={self.delta:g}{_extras(self)})")

    def budget(self, decoding: Decoding) -> VoteBudget:
        """The paid votes a response may make and the composed claim."""
        per, svt = self.eps_token or self.eps / 6, self.eps_svt or self.eps / 6
        votes = math.floor(self.eps / (per + svt) * (1 + 1e-12))
        return _budget(min(votes, decoding.max_new_tokens), per, svt, self.delta, "eps")


def _extras(mech: Any) -> str:
    parts = [f",{name}={getattr(mech, name):g}" for name in ("eps_token", "eps_svt")
             if getattr(mech, name, None) is not None]
    if mech.domain != 1:
        parts.append(f",domain={mech.domain}")
    if mech.abstain != "no-retrieval":
        parts.append(f",abstain={mech.abstain}")
    if mech.per_voter != 1:
        parts.append(f",per_voter={mech.per_voter}")
    return "".join(parts)


__all__ = ["ABSTAIN_MODES", "DPSparseVote", "DPVote", "VoteBudget"]
