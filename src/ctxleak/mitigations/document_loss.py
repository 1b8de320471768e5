"""What a DP mechanism's answer actually spent on one document of the datastore: its ex-post
privacy loss ``L = log P(transcript | D) − log P(transcript | D ∖ {d})``, computed from the
mechanism's own output distributions at every recorded step, the quantity its claim bounds
(an (ε, δ)-DP claim lets ``|L|`` exceed ε only rarely, how rarely set by δ).

This is not the influence an influence run reports for a mechanism's answer (the model's
likelihood ratio with and without the documents, scored as plain decoding scores it): that
measures the model, this measures the mechanism. Over a datastore, removing ``d`` changes:

- **DP-RAG** ("RAG with Differential Privacy", Grislain): the threshold's exponential mechanism
  (the document counts ``n(τ)`` lose ``d``), and, where ``d`` reached a prompt, every step's
  exponential mechanism, which loses ``d``'s clipped score. Both exact (log-softmaxes).
- **DPVoteRAG / DPSparseVoteRAG** ("Privacy-Preserving Retrieval-Augmented Generation with
  Differential Privacy", Koga, Wu and Chaudhuri): the one voter whose shard holds ``d`` reads
  what its shard's retrieval returns without ``d``, so its vote may move at each step. A paid
  vote's loss is the limited-domain step's, exact
  (:func:`~ctxleak.kernels.vote.limited_domain_logprobs`, ⊥ included); a sparse-vector round's
  (its free steps and the test that paid, or an unfinished round's free steps) integrates the
  threshold's Laplace noise ρ numerically: ``∫ f(ρ) Π_free P(a_i + ν ≥ T + ρ) · P(a_k + ν <
  T + ρ) dρ`` (scipy's ``quad`` between the integrand's kinks; no library computes an SVT
  transcript's probability). A round's loss is charged to the step that ends it.
- **DP-KSA** ("Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and
  Annavaram): the one voter whose shard holds ``d`` answers again from what its shard's
  retrieval returns without ``d`` (greedily, as it answered), its keyword set replaces the
  recorded one, and the loss is the propose-test-release outcome's log-probability with the
  recorded sets less that with the changed one (exact: the Laplace tail).

The counterfactual voter and streams are scored teacher-forced over the released tokens, so a
near-tie decided differently in that pass than in decoding can move a vote: ``check`` says how
far the recomputation of what was recorded lands from the record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.scoring import continuation_logits
from ctxleak.engine.streams import mask_eos_before_min, masked_ids
from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import (
    ABSTAIN,
    limited_domain_logprobs,
    vote_counts,
)
from ctxleak.mitigations.datastore import SIMILARITY_RANGE, Datastore
from ctxleak.mitigations.dp_retrieval import threshold_grid, threshold_logprobs
from ctxleak.mitigations.keywords import outcome_logprob
from ctxleak.mitigations.losses import within_claim
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding, DocumentLoss, Mechanism, MechanismAnswer

#: The largest :attr:`DocumentLoss.check` a run reports a loss at: DP-RAG's recomputed
#: log-probs within 1e-3 nats of the record (float32 forwards differ by about 1e-4), the
#: votes' recomputed votes all equal to the record.
CHECK_TOLERANCE = 1e-3


def document_loss(mechanism: Mechanism, lm: LanguageModel, request: AnswerRequest,
                  answer: MechanismAnswer, document: str, decoding: Decoding) -> DocumentLoss:
    """The ex-post privacy loss ``answer`` (decoded by ``mechanism`` for ``request`` with
    ``decoding``) spent on the datastore's document ``document`` (module docstring;
    :meth:`~ctxleak.mitigations.mechanisms.Mechanism.document_losses`)."""
    losses = mechanism.document_losses(lm, request, answer, [document], decoding)
    if losses is None:
        raise ConfigError(f"{mechanism.describe()}: a document's ex-post loss is computed for "
                          "the DP mechanisms dp-rag, dp-vote, dp-sparse-vote and dp-ksa (CID's is its "
                          "influence reading)", param="mechanism")
    return losses[0]


def own_document_losses(mechanism: Mechanism, lm: LanguageModel, request: AnswerRequest,
                        answer: MechanismAnswer, decoding: Decoding) -> dict[str, float] | None:
    """:meth:`DocumentLoss.total` of each of the request's own documents (``request.ids``)
    that the datastore holds, by id; None where there is nothing to compute: a mechanism
    without a loss of its own, no datastore, or documents without ids. A loss whose
    recomputation lands farther from the record than :data:`CHECK_TOLERANCE` is left out
    rather than reported."""
    store = request.datastore
    if store is None or request.ids is None:
        return None
    held = {doc_id for doc_id, _ in store.documents}
    losses = mechanism.document_losses(lm, request, answer, [
        doc_id for doc_id in dict.fromkeys(request.ids) if doc_id in held], decoding)
    return None if losses is None else \
        {loss.document: loss.total for loss in losses if loss.check <= CHECK_TOLERANCE}


def _without(mech: Any, request: AnswerRequest, answer: MechanismAnswer, document: str,
             decoding: Decoding) -> tuple[Datastore, Datastore | None, list[int]]:
    """The request's datastore, that datastore without ``document`` (None: it is empty then)
    and the released tokens, once ``document``, ``answer`` and ``decoding`` are checked to be
    what ``mech`` decoded from that datastore."""
    store = request.datastore
    if store is None:
        raise ConfigError("datastore: a document's loss is over the datastore the mechanism "
                          "retrieved from, and the request has none", param="datastore")
    if document not in {doc_id for doc_id, _ in store.documents}:
        raise ConfigError(f"document: {document!r} is not a document of {store.describe()}",
                          param="document")
    claim = mech.claim(decoding)
    if (answer.claim.eps, answer.claim.delta) != (claim.eps, claim.delta):
        raise ConfigError(f"decoding: {mech.key()} with these settings claims ε = "
                          f"{claim.eps:.6g}, δ = {claim.delta:.3g}, and the answer says ε = "
                          f"{answer.claim.eps}, δ = {answer.claim.delta}: give the mechanism "
                          "and the decoding the answer was decoded with", param="decoding")
    rest = [pair for pair in store.documents if pair[0] != document]
    return store, Datastore.of(rest) if rest else None, \
        [int(s["token_id"]) for s in answer.steps if s.get("token_id") is not None]


def _teacher_forced(lm: LanguageModel, prompts: Sequence[Sequence[int]], tokens: list[int],
                    min_new_tokens: int) -> list[torch.Tensor]:
    """Each prompt's float64 logits ``[T, V]`` over the released ``tokens``, EOS masked before
    the minimum length as the engine masked it while decoding."""
    def reduce(_: int, logits: torch.Tensor) -> torch.Tensor:
        return mask_eos_before_min(logits.double().cpu(), lm.eos_ids, min_new_tokens)

    return continuation_logits(lm, prompts, [tokens] * len(prompts), reduce=reduce)


# -- DP-RAG ------------------------------------------------------------------------------------


def dp_rag_loss(mech: Any, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                document: str, decoding: Decoding) -> DocumentLoss:
    """DP-RAG's loss of ``document`` (module docstring; ``mech``: a
    :class:`~ctxleak.mitigations.dp_rag.DPRAG`, read by its words and fields)."""
    store, without, tokens = _without(mech, request, answer, document, decoding)
    tau = answer.steps[0].get("threshold") if answer.steps else None
    if tau is None:
        raise ConfigError("answer: its steps record no retrieval threshold (was it decoded by "
                          "dp-rag over this datastore?)", param="answer")
    low, high = mech.score_range or SIMILARITY_RANGE
    grid = threshold_grid(low, high, mech.grid)
    j = int(torch.argmin((grid - float(tau)).abs()))
    if abs(float(grid[j]) - float(tau)) > 1e-9:
        raise ConfigError(f"answer: its threshold {tau} is not on {mech.key()}'s grid: give "
                          "the mechanism the answer was decoded with", param="answer")
    with_d = threshold_logprobs(store.similarities(request.query), grid, mech.top_k,
                                mech.retrieval_eps)
    rest = [] if without is None else without.similarities(request.query)
    without_d = threshold_logprobs(rest, grid, mech.top_k, mech.retrieval_eps)
    retrieval = float(with_d[j] - without_d[j])
    used = list(answer.datastore_used)
    if document not in used:
        return DocumentLoss(document, mech.key(), answer.claim, retrieval,
                            (0.0,) * len(tokens), "the threshold's odds; it reached no prompt",
                            0.0)
    texts = dict(store.documents)
    # without it, the threshold keeps the next document in its place where more passed
    rest_ids = [] if without is None else [d for d, _ in without.documents]
    neighbour = [rest_ids[i] for i in mech.kept(rest, float(tau))]
    ids = list(dict.fromkeys([*used, *neighbour]))
    prompts = [request.prompt([texts[i]]) for i in ids] + [request.prompt([])]
    logits = _teacher_forced(lm, prompts, tokens, decoding.min_new_tokens)
    docs, prior = torch.stack(logits[:-1]), logits[-1]
    mine = torch.tensor([i in used for i in ids])
    keep = torch.tensor([i in neighbour for i in ids])
    eps_token, steps, check = mech.step_eps(decoding, True), [], 0.0
    for t, token in enumerate(tokens):
        excluded = masked_ids(lm.eos_ids, decoding.min_new_tokens, t)
        args = (eps_token, decoding.temperature, excluded)
        full = mech.step_logprobs(docs[mine, t], prior[t], *args)[token]
        less = mech.step_logprobs(docs[keep, t], prior[t], *args)[token]
        steps.append(float(full - less))
        check = max(check, abs(float(full) - float(answer.steps[t]["logp_mechanism"])))
    return DocumentLoss(document, mech.key(), answer.claim, retrieval, tuple(steps),
                        f"the threshold's odds and {len(tokens)} steps' scores of one of the "
                        f"{len(used)} documents in the prompts", check)


# -- the votes -----------------------------------------------------------------------------------


def vote_loss(mech: Any, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
              document: str, decoding: Decoding) -> DocumentLoss:
    """A vote's loss of ``document`` (module docstring; ``mech``: a
    :class:`~ctxleak.mitigations.dp_vote.DPVote` or ``DPSparseVote``, read by its words and
    fields: ``svt_threshold()`` None for the plain vote)."""
    store, without, tokens = _without(mech, request, answer, document, decoding)
    if any(len(step.get("votes") or ()) != mech.shards for step in answer.steps):
        raise ConfigError("answer: its steps record no voters' votes (decoded by an older "
                          "ctxleak?): decode it again", param="answer")
    shard = Datastore.shard_of(document, mech.shards)
    reads = [[] if s is None else [h.text for h in s.shard_search(
        request.query, mech.shards, mech.per_voter)[shard]] for s in (store, without)]
    zeros = (0.0,) * len(tokens)
    if reads[0] == reads[1]:
        return DocumentLoss(document, mech.key(), answer.claim, 0.0, zeros,
                            f"nothing: voter {shard} reads the same documents without it", 0.0)
    line = mech.svt_threshold()  # the sparse vote's test, in votes (None: a plain vote)
    budget = mech.budget(decoding)
    logits = _teacher_forced(lm, [request.prompt(texts) for texts in reads], tokens,
                             mech.new_tokens(decoding, budget)[1])
    moved = [torch.argmax(x, dim=-1).tolist() for x in logits]
    scale, gap = mech.noise(budget)
    vocab = logits[0].shape[-1]
    steps, pending = [0.0] * len(tokens), []
    for t, step in enumerate(answer.steps):
        votes = [int(v) for v in step["votes"]]
        with_d = vote_counts(torch.tensor(votes), vocab)
        without_d = with_d.clone()
        without_d[votes[shard]] -= 1  # d's voter moves only where d moved it when recomputed
        without_d[votes[shard] if moved[0][t] == moved[1][t] else moved[1][t]] += 1
        empty = int(step["no_retrieval_token"])
        if step.get("source") == "budget spent":
            continue
        if line is not None:
            pending.append((float(with_d[empty]), float(without_d[empty])))
            if not step["paid"]:
                continue
            steps[t] += svt_round_loss(pending, line, budget.eps_svt, paid=True)
            pending = []
        outcome = int(step["token_id"]) if step["source"] == "vote" else ABSTAIN
        steps[t] += vote_step_loss(with_d, without_d, outcome, scale, gap, mech.domain)
    if pending:  # a round the response ended before it paid: its free steps
        last = max(t for t, s in enumerate(answer.steps) if s.get("source") != "budget spent")
        steps[last] += svt_round_loss(pending, line, budget.eps_svt, paid=False)
    check = sum(int(s["votes"][shard]) != v for s, v in zip(answer.steps, moved[0])
                if s.get("source") != "budget spent")
    return DocumentLoss(document, mech.key(), answer.claim, 0.0, tuple(steps),
                        f"the documents voter {shard} of {mech.shards} reads", float(check))


def ksa_loss(mech: Any, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
             document: str, decoding: Decoding) -> DocumentLoss:
    """DP-KSA's loss of ``document`` (module docstring; ``mech``: a
    :class:`~ctxleak.mitigations.dp_ksa.DPKSA`, read by its words and fields). ``check``: 1
    where the voter's keyword set, recomputed from its documents, differs from the record."""
    store, without, _ = _without(mech, request, answer, document, decoding)
    record = answer.steps[0] if answer.steps else {}
    sets = record.get("voter_keywords") or []
    if record.get("source") != "propose-test-release" or len(sets) != mech.shards:
        raise ConfigError("answer: its first step records no voters' keyword sets (was it "
                          "decoded by dp-ksa over this datastore?)", param="answer")
    shard = Datastore.shard_of(document, mech.shards)
    reads = [[] if s is None else [h.text for h in s.shard_search(
        request.query, mech.shards, mech.per_voter)[shard]] for s in (store, without)]
    if reads[0] == reads[1]:
        return DocumentLoss(document, mech.key(), answer.claim, 0.0, (0.0,),
                            f"nothing: voter {shard} reads the same documents without it", 0.0)
    again, changed = mech.keyword_sets(lm, request, reads)
    recorded = [frozenset(s) for s in sets]
    less = [*recorded[:shard], changed, *recorded[shard + 1:]]
    released = record.get("released")
    args = (released, mech.keywords, mech.eps, mech.delta)
    loss = outcome_logprob(recorded, *args) - outcome_logprob(less, *args)
    return DocumentLoss(document, mech.key(), answer.claim, 0.0, (loss,),
                        f"the keyword set of voter {shard} of {mech.shards}",
                        float(again != recorded[shard]))


def vote_step_loss(with_d: torch.Tensor, without_d: torch.Tensor, outcome: int, scale: float,
                   gap: float, domain: int) -> float:
    """One limited-domain step's loss: ``log P(outcome | h) − log P(outcome | h')`` for the
    vote histograms with and without the document (``outcome``: a token id or
    :data:`~ctxleak.kernels.vote.ABSTAIN`); ±inf where the outcome is impossible on one side
    (the δ of the step; a released outcome is never impossible with the document)."""
    index = -1 if outcome == ABSTAIN else outcome
    p = float(limited_domain_logprobs(with_d, scale, gap, domain)[index])
    q = float(limited_domain_logprobs(without_d, scale, gap, domain)[index])
    if math.isinf(p) or math.isinf(q):
        return math.inf if q == -math.inf and p > -math.inf else -math.inf
    return p - q


def svt_round_loss(agree: Sequence[tuple[float, float]], threshold: float, eps_svt: float,
                   *, paid: bool) -> float:
    """One sparse-vector round's loss (Lyu, Su and Li's Alg. 1 with one positive): ``agree``
    holds each tested step's count of voters agreeing with the no-retrieval token, with and
    without the document; every step but the last (all of them where not ``paid``) let the
    no-retrieval token through (``a + ν ≥ T + ρ``), the last paid (``a + ν < T + ρ``);
    ``ρ ~ Lap(2/ε)``, ``ν ~ Lap(4/ε)``."""
    return svt_round_logprob([a for a, _ in agree], threshold, eps_svt, paid) - \
        svt_round_logprob([b for _, b in agree], threshold, eps_svt, paid)


def svt_round_probability(agree: Sequence[float], threshold: float, eps_svt: float,
                          paid: bool) -> float:
    """The probability of one round's outcomes (:func:`svt_round_loss`)."""
    return math.exp(svt_round_logprob(agree, threshold, eps_svt, paid))


def svt_round_logprob(agree: Sequence[float], threshold: float, eps_svt: float,
                      paid: bool) -> float:
    """The log-probability of one round's outcomes (:func:`svt_round_loss`): the integrand
    over ρ in logs, shifted by its largest value at the kinks so that a round of a tiny
    probability (counts far from the threshold at a large ε) neither underflows nor
    overflows, integrated by ``quad`` between the kinks."""
    from scipy import integrate  # here: the mechanisms import this module's package lightly

    rho_scale, nu_scale = 2.0 / eps_svt, 4.0 / eps_svt
    frees, last = (agree[:-1], agree[-1]) if paid else (agree, None)
    half = math.log(0.5)

    def log_below(x: float) -> float:  # log P(ν < x), the Laplace CDF
        return half + x / nu_scale if x < 0 else math.log1p(-0.5 * math.exp(-x / nu_scale))

    def log_above(x: float) -> float:  # log P(ν ≥ x)
        return math.log1p(-0.5 * math.exp(x / nu_scale)) if x < 0 else half - x / nu_scale

    def log_integrand(rho: float) -> float:
        value = -abs(rho) / rho_scale - math.log(2.0 * rho_scale)
        value += math.fsum(log_above(threshold + rho - a) for a in frees)
        return value + log_below(threshold + rho - last) if last is not None else value

    kinks = sorted({0.0, *(a - threshold for a in agree)})
    shift = max(log_integrand(x) for x in kinks)
    edges = [-math.inf, *kinks, math.inf]
    total = math.fsum(integrate.quad(lambda rho: math.exp(log_integrand(rho) - shift), lo, hi,
                                     epsabs=0.0, epsrel=1e-11, limit=200)[0]
                      for lo, hi in zip(edges, edges[1:]))
    return shift + math.log(total)


__all__ = ["DocumentLoss", "document_loss", "dp_rag_loss", "ksa_loss", "own_document_losses",
           "svt_round_logprob", "svt_round_loss", "svt_round_probability", "vote_loss",
           "vote_step_loss", "within_claim"]
