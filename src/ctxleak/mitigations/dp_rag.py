"""DP-RAG ("RAG with Differential Privacy", Grislain) as a
:class:`~ctxleak.mitigations.mechanisms.Mechanism` decoded by the engine.

1. Private retrieval (:mod:`ctxleak.mitigations.dp_retrieval`): a similarity threshold drawn by
   an exponential mechanism of ``eps_retrieval``; the documents scoring at least it are used.
   Where the request gives the datastore, as the paper does, the threshold runs over every
   document of the datastore, each scored by its word similarity to the question
   (:func:`~ctxleak.mitigations.datastore.word_similarity`, which reads no other document);
   else over the request's documents and their scores. A request without similarity scores
   uses all its documents (nothing to retrieve privately).
2. Per-token exponential mechanism: each used document is one prompt stream, and the prompt
   without retrieval is the public prior ``p_∅`` (at the decoding temperature). Document d's
   score of token y is its clipped log-likelihood ratio over the prior,
   ``s_d(y) = min(max(log p_d(y) − log p_∅(y), 0), C)``, and the token is drawn from
   ``P(y) ∝ p_∅(y) · exp(ε_t · Σ_d s_d(y) / C)``. Adding or removing one document adds or
   removes one ``s_d`` in ``[0, C]`` for every token at once (a monotone change of at most
   ``C``), so each token is ε_t-DP and ε_t-bounded-range, with respect to one document.
3. Composition: the retrieval and every step (the stopping EOS included, ``max_new_tokens``
   at most) compose in Rényi DP (:class:`~ctxleak.mitigations.accounting.RDPAccountant`,
   the exponential mechanism's bound) and convert to ``(ε, δ)``; ε_t is the largest per-token
   ε whose composition stays within ``eps`` at ``delta`` (bisection).

The claim's relation is "document": adding or removing one document of the datastore (or, for
a request without one, of the request's documents). Noise is drawn from the request's seed and the step.

Over a datastore the retrieval keeps at most ``top_k`` of the documents at or above the
threshold (the highest similarities, a tie going to the document listed first), so an answer
decodes at most ``top_k + 1`` streams, what :meth:`DPRAG.streams` reports and the proxy checks
against ``--max-streams``, however many documents tie at the threshold or pass a low one. A
document added can then displace one of the ``top_k`` (a swap, not only an addition): a token's
score moves by at most ``C`` either way, so over a datastore each step's exponent is ε_t / 2,
which keeps every step ε_t-bounded-range and the claim as composed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.streams import StreamJob
from ctxleak.errors import ConfigError
from ctxleak.kernels.draw import draw
from ctxleak.mitigations.accounting import (
    ExponentialMechanismEvent,
    PrivacyEvent,
    RDPAccountant,
)
from ctxleak.mitigations.datastore import SIMILARITY_RANGE
from ctxleak.mitigations.document_loss import dp_rag_loss
from ctxleak.mitigations.dp_retrieval import passing, private_retrieval, threshold_grid
from ctxleak.mitigations.dp_vote import (
    check_delta,
    check_eps,
    decode_jobs,
    finish_answer,
    noise_generator,
    one_hot_logprobs,
)
from ctxleak.mitigations.losses import Events, Loss
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    DocumentLoss,
    Mechanism,
    MechanismAnswer,
    refuse_greedy,
)

#: Bisection steps of the per-token ε (to within eps · 2⁻⁶⁰).
CALIBRATION_STEPS = 60


def dp_rag_logprobs(doc_logits: torch.Tensor, empty_logits: torch.Tensor, eps_token: float,
                    clip: float, temperature: float, excluded: Sequence[int] = ()
                    ) -> torch.Tensor:
    """One step's sampling distribution (module docstring, step 2), float64 log-probs
    ``[V]`` from the used documents' logits ``[n, V]`` (n may be 0) and the prior's ``[V]``;
    ``excluded`` token ids (EOS before the minimum length) get probability 0."""
    prior = torch.log_softmax(empty_logits.double() / temperature, dim=-1)
    score = torch.zeros_like(prior)
    if doc_logits.shape[0]:
        docs = torch.log_softmax(doc_logits.double() / temperature, dim=-1)
        score = torch.clamp(docs - prior, min=0.0, max=clip).sum(dim=0)
    logits = prior + eps_token * score / clip
    if excluded:
        logits[list(excluded)] = -math.inf
    return torch.log_softmax(logits, dim=-1)


def composed_epsilon(eps_token: float, steps: int, eps_retrieval: float, delta: float) -> float:
    """The ``(ε, δ)`` ε of one retrieval and ``steps`` tokens (module docstring, step 3): the
    smaller of the Rényi-DP composition converted at ``delta`` and the basic composition of
    the pure ε's (``eps_retrieval + steps·eps_token``, which holds at δ = 0 and so at any δ)."""
    acc = RDPAccountant()
    if eps_retrieval > 0:
        acc.compose(ExponentialMechanismEvent(eps_retrieval))
    acc.compose(ExponentialMechanismEvent(eps_token), steps)
    return min(acc.get_epsilon(delta), eps_retrieval + steps * eps_token)


def calibrate_token_eps(eps: float, steps: int, eps_retrieval: float, delta: float) -> float:
    """The largest per-token ε whose composition is at most ``eps`` (bisection); a
    :class:`ConfigError` when the retrieval alone spends it."""
    if eps_retrieval >= eps:
        raise ConfigError(f"eps_retrieval: {eps_retrieval:g} spends all of eps {eps:g}",
                          param="eps_retrieval")
    low, high = 0.0, eps
    for _ in range(CALIBRATION_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if composed_epsilon(mid, steps, eps_retrieval, delta) <= eps \
            else (low, mid)
    return low


def _score_range(value: Any) -> tuple[float, float] | None:
    """``score_range`` as a pair of floats, from a pair or the text ``"low:high"``; None: the
    default of what is thresholded (:meth:`DPRAG.thresholds`)."""
    if value is None:
        return None
    parts = value.split(":") if isinstance(value, str) else value
    try:
        low, high = (float(v) for v in parts)
    except (TypeError, ValueError):
        raise ConfigError(f"score_range: {value!r} is not two numbers low:high, e.g. 0:1",
                          param="score_range") from None
    return low, high


@dataclass(frozen=True)
class DPRAG(Mechanism):
    """DP-RAG (module docstring): ``eps``, ``delta``: the whole response's budget (relation
    "document"); ``clip``: the cap C of a document's log-likelihood ratio (nats);
    ``eps_retrieval``: the threshold's ε (default ``eps / 10``; 0: use every document, no
    retrieval); ``top_k``: the documents the threshold aims at; ``score_range`` (None: 0 to 1
    for a request's retrieval scores, 0 to 0.6 for the word similarities over a datastore,
    :data:`~ctxleak.mitigations.datastore.SIMILARITY_RANGE`; or a pair, or
    ``"low:high"`` as a command line writes it), ``grid``: the public thresholds."""

    name: ClassVar[str] = "dp-rag"
    min_documents: ClassVar[int] = 1

    eps: float
    delta: float = 1e-3
    clip: float = 1.0
    eps_retrieval: float | None = None
    top_k: int = 3
    score_range: tuple[float, float] | None = None
    grid: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "score_range", _score_range(self.score_range))
        check_eps(self.eps)
        check_delta(self.delta)
        check_eps(self.clip, "clip")
        if self.eps_retrieval is not None and not (
                math.isfinite(self.eps_retrieval) and 0 <= self.eps_retrieval < self.eps):
            raise ConfigError(f"eps_retrieval: {self.eps_retrieval} is not an ε in [0, eps)",
                              param="eps_retrieval")
        if isinstance(self.top_k, bool) or not (isinstance(self.top_k, int) and self.top_k >= 1):
            raise ConfigError(f"top_k: {self.top_k} is not a number of documents >= 1",
                              param="top_k")
        threshold_grid(*(self.score_range or (0.0, 1.0)), self.grid)

    @property
    def retrieval_eps(self) -> float:
        return self.eps / 10 if self.eps_retrieval is None else self.eps_retrieval

    def key(self) -> str:
        extra = "" if self.clip == 1.0 else f",clip={self.clip:g}"
        if self.eps_retrieval is not None:
            extra += f",eps_retrieval={self.eps_retrieval:g}"
        if self.top_k != 3:
            extra += f",top_k={self.top_k}"
        if self.score_range is not None:
            extra += f",score_range={self.score_range[0]:g}:{self.score_range[1]:g}"
        if self.grid != 32:
            extra += f",grid={self.grid}"
        return f"dp-rag(eps={self.eps:g},delta={self.delta:g}{extra})"

    def token_eps(self, decoding: Decoding) -> float:
        """ε_t: each of ``max_new_tokens`` steps' ε (module docstring, step 3)."""
        return calibrate_token_eps(self.eps, decoding.max_new_tokens, self.retrieval_eps,
                                   self.delta)

    def claim(self, decoding: Decoding) -> Claim:
        eps = composed_epsilon(self.token_eps(decoding), decoding.max_new_tokens,
                               self.retrieval_eps, self.delta)
        return Claim(eps=eps, delta=self.delta, relation="document")

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        refuse_greedy(self, decoding)
        eps_token, claim = self.token_eps(decoding), self.claim(decoding)
        parts = [self._job(r, decoding, eps_token) for r in requests]
        gens = decode_jobs(lm, [job for job, _ in parts], what="the dp-rag mechanism")
        return [finish_answer(g, claim, used) if r.datastore is None
                else finish_answer(g, claim, (), [r.datastore.documents[i][0] for i in used])
                for g, r, (_, used) in zip(gens, requests, parts)]

    def renyi_events(self, decoding: Decoding) -> Events:
        """The retrieval's exponential mechanism and ``max_new_tokens`` steps of ε_t (module
        docstring, step 3)."""
        events: list[tuple[PrivacyEvent, int]] = [
            (ExponentialMechanismEvent(self.token_eps(decoding)), decoding.max_new_tokens)]
        if self.retrieval_eps > 0:
            events.insert(0, (ExponentialMechanismEvent(self.retrieval_eps), 1))
        return tuple(events)

    def document_charges(self, request: AnswerRequest, decoding: Decoding
                         ) -> dict[str, Loss] | None:
        """Over a datastore, each document's loss: the private retrieval's ε for every document
        (its threshold's utility counts them all), and the whole claim's for those the drawn
        threshold keeps (drawn from the request's seed as :meth:`answer` draws it): a document
        below the threshold reaches no prompt, so the steps after the retrieval do not read
        it."""
        if request.datastore is None:
            return None
        documents, scores = self._candidates(request)
        used, _ = self._retrieve(documents, scores, request.seed,
                                 self.score_range or SIMILARITY_RANGE, self.top_k)
        ids = [doc_id for doc_id, _ in request.datastore.documents]
        out = dict.fromkeys(ids, Loss(float(self.retrieval_eps),
                                      ((ExponentialMechanismEvent(self.retrieval_eps), 1),)))
        whole = Loss(float(self.claim(decoding).eps or 0.0), self.renyi_events(decoding))
        out.update({ids[i]: whole for i in used})
        return out

    def streams(self, documents: int, over_datastore: bool) -> int:
        """The documents the retrieval keeps (at most ``top_k`` over a datastore, at most every
        document of the request otherwise) and the prior."""
        return (self.top_k if over_datastore else documents) + 1

    def step_eps(self, decoding: Decoding, over_datastore: bool) -> float:
        """A step's exponent: ε_t; over a datastore ε_t / 2 (module docstring: the retrieval
        keeps at most ``top_k``, so one document added may displace another)."""
        eps_token = self.token_eps(decoding)
        return eps_token / 2 if over_datastore else eps_token

    def kept(self, scores: Sequence[float], tau: float) -> tuple[int, ...]:
        """The datastore documents (indices) a threshold ``tau`` keeps: at most ``top_k``."""
        return passing(scores, tau, self.top_k)

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> list[DocumentLoss]:
        """Each document's loss: the threshold's odds and, where it reached a prompt, every
        step's scores (:func:`~.document_loss.dp_rag_loss`)."""
        return [dp_rag_loss(self, lm, request, answer, d, decoding) for d in documents]

    def step_logprobs(self, doc_logits: torch.Tensor, empty_logits: torch.Tensor,
                      eps_token: float, temperature: float, excluded: Sequence[int]
                      ) -> torch.Tensor:
        """One step's distribution (:func:`dp_rag_logprobs`; a test's broken variant
        overrides it)."""
        return dp_rag_logprobs(doc_logits, empty_logits, eps_token, self.clip, temperature,
                               excluded)

    def _candidates(self, request: AnswerRequest
                    ) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
        """The documents the private retrieval chooses from and their similarities: the
        datastore's where the request gives one, else the request's."""
        store = request.datastore
        if store is None:
            return request.documents, request.scores
        if not request.query.strip():
            raise ConfigError("query: dp-rag retrieves from the datastore for the question, and "
                              "the request has none", param="query")
        if self.retrieval_eps == 0:
            raise ConfigError(f"eps_retrieval: 0 would read every document of "
                              f"{store.describe()}: give an ε for the private retrieval",
                              param="eps_retrieval")
        return tuple(text for _, text in store.documents), tuple(store.similarities(request.query))

    def _retrieve(self, documents: Sequence[str], scores: Sequence[float] | None,
                  seed: int, scale: tuple[float, float], cap: int | None = None
                  ) -> tuple[tuple[int, ...], float | None]:
        """The used documents' indices (at most ``cap``) and the drawn threshold (None: no
        retrieval)."""
        if not documents:
            raise ConfigError("documents: dp-rag needs at least one document", param="documents")
        if scores is None or self.retrieval_eps == 0:
            return tuple(range(len(documents))), None
        if len(scores) != len(documents):
            raise ConfigError(f"scores: {len(scores)} similarities for {len(documents)} "
                              "documents", param="scores")
        tau, used = private_retrieval(scores, threshold_grid(*scale, self.grid),
                                      self.top_k, self.retrieval_eps,
                                      noise_generator(seed, 2, 0), cap)
        return used, tau

    def _job(self, request: AnswerRequest, decoding: Decoding, eps_token: float
             ) -> tuple[StreamJob, tuple[int, ...]]:
        documents, scores = self._candidates(request)
        scale = self.score_range or (SIMILARITY_RANGE if request.datastore is not None
                                     else (0.0, 1.0))
        over_datastore = request.datastore is not None
        used, tau = self._retrieve(documents, scores, request.seed, scale,
                                   self.top_k if over_datastore else None)
        if over_datastore:  # (module docstring: a swap moves a score by C either way)
            eps_token /= 2
        n, t = len(used), decoding.temperature
        prompts = [list(request.prompt([documents[i]])) for i in used]
        prompts.append(list(request.prompt([])))
        chosen: dict[str, Any] = {}

        def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()
                    ) -> torch.Tensor:
            logprobs = self.step_logprobs(logits[:n], logits[n], eps_token, t, excluded)
            token = draw(logprobs, noise_generator(request.seed, 3, step), sample=True)
            chosen.update(token=token, logp=float(logprobs[token]))
            return one_hot_logprobs(token, logits.shape[-1])

        def observe(logits: torch.Tensor, logprobs: torch.Tensor, token: int, step: int
                    ) -> dict[str, Any]:
            prior = torch.log_softmax(logits[n].double() / t, dim=-1)
            return {"step": step, "token_id": int(token), "paid": True, "eps_step": eps_token,
                    "logp_mechanism": chosen["logp"], "logp_empty": float(prior[token]),
                    "documents": n, "threshold": tau}

        job = StreamJob(prompts, combine, observe, request.seed, decoding.max_new_tokens,
                        decoding.min_new_tokens, replay=False)
        return job, used


__all__ = ["DPRAG", "calibrate_token_eps", "composed_epsilon", "dp_rag_logprobs"]
