"""A DP vote over whole short answers: sample-and-aggregate ("Smooth Sensitivity and Sampling
in Private Data Analysis", Nissim, Raskhodnikova and Smith) with the limited-domain step of
DPVoteRAG ("Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy", Koga,
Wu and Chaudhuri) applied once per response to the voters' answers rather than at every token.

The per-token vote releases a token only when enough voters agree on it, and voters that agree
on the answer ("Harwich") seldom agree on the sentence around it. Here each of ``shards``
voters reads the documents it retrieves from its own shard of the datastore (as the votes do:
:class:`~ctxleak.mitigations.dp_vote.DPVote`) and answers in full, greedily, at most
``answer_tokens`` tokens; its answer is cut at the first line break and normalised as SQuAD
normalises answers (:func:`normalise_answer`: lower case, no punctuation, no articles, single
spaces). The normalised answers form a histogram over the candidates (the answers given and
the empty answer, which a voter whose answer normalises to nothing votes for); one
limited-domain top-1 step (:func:`~ctxleak.kernels.vote.limited_domain`, the candidates in
lexicographic order, so ties break by a rule that reads no document) releases the most
frequent answer, or abstains (⊥). The released response is the winning normalised answer's
text; after ⊥, or where the empty answer wins, it is the answer the model gives to the
question alone (no document in its prompt, cut as the voters' are), a function of public data
that costs nothing.

Its claim: adding or removing one document of the datastore changes one voter's prompt, so one
vote moves (the relation the limited-domain step is proved for), and the response is
``(ε, δ)``-DP per response with ``ε = eps``, ``δ = delta`` (relation "document" over a
request's datastore; "shard" over a dealt retrieved list, as the votes'). The voters and the
question-alone answer decode greedily: the response's only randomness is the step's Gumbel
noise, drawn from the request's seed, so ``decoding.greedy`` (no noise) is refused and its
temperature is not used.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from ctxleak.engine.generation import sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import (
    ABSTAIN,
    limited_domain,
    limited_domain_gap,
    limited_domain_logprobs,
    vote_scale,
)
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.dp_vote import check_delta, check_eps, noise_generator
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    DocumentLoss,
    MechanismAnswer,
    refuse_greedy,
)
from ctxleak.mitigations.sharded import ShardedVoters

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
#: The draw site of the answer vote's noise (the token votes use 0 and 1).
NOISE_TAG = 2


def normalise_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def short_answer(text: str) -> str:
    """A voter's answer as it is voted on: its text up to the first line break, stripped."""
    return text.strip().split("\n", 1)[0].strip()


def candidates_of(*answers: Sequence[str]) -> list[str]:
    """The candidates of a vote over ``answers``: the distinct answers and the empty one, in
    lexicographic order (the empty answer first)."""
    return sorted({""}.union(*answers))


def answer_counts(answers: Sequence[str], candidates: Sequence[str]) -> torch.Tensor:
    """How many of ``answers`` give each of ``candidates`` (float64)."""
    index = {a: i for i, a in enumerate(candidates)}
    counts = torch.zeros(len(candidates), dtype=torch.float64)
    for a in answers:
        counts[index[a]] += 1
    return counts


def outcome_logprob(answers: Sequence[str], candidates: Sequence[str], released: str | None,
                    scale: float, gap: float) -> float:
    """The log-probability that the vote over ``answers`` releases ``released`` (None: the
    question-alone answer, after ⊥ or the empty answer's win), exact
    (:func:`~ctxleak.kernels.vote.limited_domain_logprobs`)."""
    logp = limited_domain_logprobs(answer_counts(answers, candidates), scale, gap, 1)
    if released is not None:
        return float(logp[list(candidates).index(released)])
    return float(torch.logaddexp(logp[-1], logp[0]))  # ⊥, or the empty answer (first)


@dataclass(frozen=True)
class DPAnswerVote(ShardedVoters):
    """The answer vote (module docstring): ``shards`` voters, each reading ``per_voter``
    documents of its shard and answering greedily in at most ``answer_tokens`` tokens; one
    limited-domain step over their normalised answers at ``(eps, delta)`` per response."""

    name: ClassVar[str] = "dp-answer-vote"

    eps: float
    shards: int
    delta: float = 1e-4
    per_voter: int = 1
    answer_tokens: int = 16

    def __post_init__(self) -> None:
        check_eps(self.eps)
        check_delta(self.delta)
        if isinstance(self.shards, bool) or not (isinstance(self.shards, int)
                                                 and self.shards >= 3):
            raise ConfigError(f"shards: a vote needs at least 3 voters (a released answer leads "
                              f"the next by more than 2 votes), not {self.shards}",
                              param="shards")
        for name in ("per_voter", "answer_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"{name}: {value} is not an integer >= 1", param=name)
        try:
            vote_scale(self.eps, self.delta)
        except ValueError as exc:
            raise ConfigError(f"eps: {exc}", param="eps") from None

    def key(self) -> str:
        extras = "".join(f",{n}={getattr(self, n)}" for n, d in (("per_voter", 1),
                         ("answer_tokens", 16)) if getattr(self, n) != d)
        return f"dp-answer-vote(eps={self.eps:g},shards={self.shards},delta={self.delta:g}{extras})"

    def noise(self) -> tuple[float, float]:
        """The step's Gumbel scale ``b`` (``2/b + ln(1 + δ) = ε``) and its threshold gap
        (``2 + b·ln(1/δ)`` votes above the second count)."""
        scale = vote_scale(self.eps, self.delta)
        return scale, limited_domain_gap(scale, self.delta, 1)

    def claim(self, decoding: Decoding) -> Claim:
        return Claim(eps=float(self.eps), delta=float(self.delta), relation="shard")

    def release(self, counts: torch.Tensor, scale: float, gap: float,
                generator: torch.Generator) -> int:
        """The limited-domain top-1 step: a candidate's index, or ⊥ (a test's broken variant
        overrides it)."""
        return limited_domain(counts, scale, gap, 1, generator)

    def voter_answers(self, lm: LanguageModel, prompts: Sequence[Sequence[int]],
                      decoding: Decoding) -> list[str]:
        """Each prompt's greedy answer, cut (:func:`short_answer`), not normalised."""
        return [short_answer(lm.decode(ids)) for ids in self._greedy(lm, prompts, decoding)]

    def _greedy(self, lm: LanguageModel, prompts: Sequence[Sequence[int]],
                decoding: Decoding) -> list[list[int]]:
        """Each prompt's greedy answer's token ids, at most ``answer_tokens``."""
        tokens = max(1, min(self.answer_tokens, decoding.max_new_tokens))
        gens = sample(lm, prompts, [0] * len(prompts), temperature=0.0, max_new_tokens=tokens,
                      min_new_tokens=1)
        return [list(g[0].token_ids) for g in gens]

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        refuse_greedy(self, decoding)
        voters = [self.voter_documents(r) for r in requests]
        prompts = [p for r, (texts, _) in zip(requests, voters)
                   for p in [r.prompt(t) for t in texts] + [r.prompt([])]]
        raw = self._greedy(lm, prompts, decoding)
        texts = [short_answer(lm.decode(ids)) for ids in raw]
        scale, gap = self.noise()
        claim = self.claim(decoding)
        out = []
        for k, (request, (_, read)) in enumerate(zip(requests, voters)):
            own = texts[k * (self.shards + 1):(k + 1) * (self.shards + 1)]
            answers = [normalise_answer(t) for t in own[:-1]]
            candidates = candidates_of(answers)
            counts = answer_counts(answers, candidates)
            won = self.release(counts, scale, gap, noise_generator(request.seed, NOISE_TAG, 0))
            voted = won != ABSTAIN and candidates[won] != ""
            released = candidates[won] if voted else own[-1]
            # an answer whose text is empty: the question-alone answer's own tokens (public)
            ids = tuple(lm.encode(released)) or tuple(raw[(k + 1) * (self.shards + 1) - 1])
            step = {"step": 0, "token_id": ids[0] if ids else None, "paid": True,
                    "eps_step": float(self.eps), "delta_step": float(self.delta),
                    "scale": scale, "gap": gap, "answers": answers,
                    "no_retrieval_answer": own[-1],
                    "source": "vote" if voted else "abstained",
                    "released": released, "top_votes": int(counts.max())}
            over_store = request.datastore is not None
            out.append(MechanismAnswer(
                response_ids=ids, stopped_on_eos=False,
                claim=replace(claim, relation="document") if over_store else claim,
                tokens_paid=1, steps=(step,),
                documents_used=() if over_store else tuple(range(len(request.documents))),
                datastore_used=tuple(dict.fromkeys(read))))
        return out

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> list[DocumentLoss]:
        """Each document's loss through its voter (:func:`answer_vote_loss`)."""
        return [answer_vote_loss(self, lm, request, answer, d, decoding) for d in documents]


def answer_vote_loss(mech: DPAnswerVote, lm: LanguageModel, request: AnswerRequest,
                     answer: MechanismAnswer, document: str, decoding: Decoding
                     ) -> DocumentLoss:
    """The answer's ex-post privacy loss of the datastore's ``document``: the voter of its
    shard answers again from what its shard's retrieval returns without it, and the step's
    loss is ``log P(outcome | h) − log P(outcome | h')`` of the recorded outcome under the
    histograms with and without it (exact: the limited-domain step's log-probabilities, ⊥
    included). ``check``: 1 where that voter's answer recomputed with the document differs
    from the recorded one, else 0."""
    store = request.datastore
    if store is None:
        raise ConfigError("datastore: a document's loss is over the datastore the mechanism "
                          "retrieved from, and the request has none", param="datastore")
    texts = dict(store.documents)
    if document not in texts:
        raise ConfigError(f"document: {document!r} is not a document of {store.describe()}",
                          param="document")
    if (answer.claim.eps, answer.claim.delta) != (mech.eps, mech.delta) or len(answer.steps) != 1 \
            or len(answer.steps[0].get("answers") or ()) != mech.shards:
        raise ConfigError(f"answer: not an answer of {mech.key()} (its claim or its step "
                          "differ): give the mechanism the answer was decoded with",
                          param="answer")
    step = answer.steps[0]
    shard = Datastore.shard_of(document, mech.shards)
    rest = [pair for pair in store.documents if pair[0] != document]
    reads = [[] if s is None else [h.text for h in s.shard_search(
        request.query, mech.shards, mech.per_voter)[shard]]
        for s in (store, Datastore.of(rest) if rest else None)]
    if reads[0] == reads[1]:
        return DocumentLoss(document, mech.key(), answer.claim, 0.0, (0.0,),
                            f"nothing: voter {shard} reads the same documents without it", 0.0)
    again = [normalise_answer(t) for t in mech.voter_answers(
        lm, [request.prompt(r) for r in reads], decoding)]
    recorded = [str(a) for a in step["answers"]]
    moved = list(recorded)
    moved[shard] = again[1] if again[0] == recorded[shard] else recorded[shard]
    candidates = candidates_of(recorded, moved)
    released = str(step["released"]) if step["source"] == "vote" else None
    p, q = (outcome_logprob(h, candidates, released, float(step["scale"]), float(step["gap"]))
            for h in (recorded, moved))
    loss = p - q if math.isfinite(p) and math.isfinite(q) else \
        (math.inf if q == -math.inf and p > -math.inf else -math.inf)
    return DocumentLoss(document, mech.key(), answer.claim, 0.0, (loss,),
                        f"the documents voter {shard} of {mech.shards} reads",
                        float(again[0] != recorded[shard]))


__all__ = ["DPAnswerVote", "answer_counts", "answer_vote_loss", "candidates_of",
           "normalise_answer", "outcome_logprob", "short_answer"]
