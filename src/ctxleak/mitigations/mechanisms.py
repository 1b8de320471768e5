"""One interface for the mechanisms a RAG team may put between its documents and its answers,
Context Influence Decoding included.

Context Influence Decoding and its bounded form ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.4, App. B; :class:`~ctxleak.mitigations.cid.CID`)
mix two prompts; the published alternatives read the documents otherwise: a differentially private
vote of voters that each see one shard ("Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy", Koga, Wu and Chaudhuri), an exponential mechanism over per-document
next-token scores after a private retrieval ("RAG with Differential Privacy", Grislain), or
personal data replaced in the documents before the prompt (Presidio scrubbing, no guarantee). A
:class:`Mechanism` answers one response per :class:`AnswerRequest` and returns a
:class:`MechanismAnswer` with what it claims, so that an influence run, a frontier, an attack
target and the privacy proxy ask every defence the same way and put them side by side.

The contract:

* ``answer`` is given every request of a batch and returns one answer per request, in order;
  each request draws only from its own ``seed`` (the answer does not depend on the batch);
  ``decoding.greedy`` is honoured or refused (:func:`refuse_greedy`), never ignored;
* a mechanism never reads a document it was not given, and states in ``claim`` the ε and δ it
  guarantees for the whole response, composed over its released tokens, with the neighbouring
  relation the guarantee covers (:data:`RELATIONS`): an ε per shard is not an ε per document;
* a mechanism with no guarantee says so (``Claim(eps=None, relation="none")``);
* ``tokens_paid``: the released tokens that spent privacy budget (all of them for a plain vote;
  only those that paid a vote for the sparse vote, whose rounds, the last one open included,
  its steps record: ``rounds_opened``, and ``eps_used`` the ε its steps spent).

What its consumers ask beyond ``answer`` are :class:`Mechanism`'s other words (charge,
batching and streaming to a :class:`Listener`, figures, documents and streams needed, a
document's own loss), each with a default for a mechanism that decodes a whole answer and
claims an ε per answer. To add one: a frozen dataclass subclassing :class:`Mechanism` that
validates its parameters in ``__post_init__`` (:class:`~ctxleak.errors.ConfigError` naming
the parameter), with ``name``, ``min_documents``, ``key()``, ``claim(decoding)`` and
``answer``; its entry where mechanisms are parsed by name; and
:func:`ctxleak.testing.check_mechanism` passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Protocol

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.ledger import RowLedger
from ctxleak.mitigations.losses import Events, Loss, within_claim

#: The neighbouring relations a claim can cover, and what each means for the user.
RELATIONS: Mapping[str, str] = {
    "document": "adding or removing one document of the datastore changes the probability of "
                "any response by at most a factor e^ε (plus δ)",
    "shard": "shard-level over the dealt list: changing one shard (every document one voter "
             "reads, the request's list dealt by position) changes the probability of any "
             "response by at most a factor e^ε (plus δ); a document-level ε does not follow "
             "from it, since adding or removing one document shifts every later document's "
             "shard, and which documents were retrieved is outside it",
    "context": "replacing the whole retrieved context by any other changes the probability of "
               "any response by at most a factor e^ε",
    "none": "no differential-privacy guarantee",
}


@dataclass(frozen=True)
class Claim:
    """What a mechanism guarantees for one whole response: (ε, δ)-DP under ``relation``
    (:data:`RELATIONS`); ``eps`` None with ``relation`` "none": no guarantee."""

    eps: float | None
    delta: float = 0.0
    relation: str = "none"

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ConfigError(f"relation: '{self.relation}' is not one of {sorted(RELATIONS)}",
                              param="relation")
        if self.eps is not None and (math.isnan(self.eps) or self.eps < 0):
            raise ConfigError(f"eps: {self.eps} is not an ε >= 0", param="eps")
        if not 0 <= self.delta < 1:
            raise ConfigError(f"delta: {self.delta} is not in [0, 1)", param="delta")
        if (self.eps is None) != (self.relation == "none"):
            raise ConfigError("a claim has an ε exactly when it names a relation other than "
                              "'none'", param="relation")

    def covers(self) -> str:
        """The claim in one sentence a user can act on."""
        if self.eps is None:
            return RELATIONS["none"]
        return f"(ε = {self.eps:.4g}, δ = {self.delta:.2g})-DP per response: {RELATIONS[self.relation]}"


@dataclass(frozen=True)
class Decoding:
    """The settings every mechanism shares: temperature, and 10 to 50 new tokens by default
    (the context-influence paper's generation settings; EOS is masked before the minimum)."""

    temperature: float = 0.8
    max_new_tokens: int = 50
    min_new_tokens: int = 10
    greedy: bool = False  # the most likely token at each step (where the mechanism allows)

    def __post_init__(self) -> None:
        # checked here, before any mechanism decodes: a NaN temperature would sample from NaN
        if isinstance(self.temperature, bool) or not (
                isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ConfigError(f"temperature must be a finite number >= 0, not "
                              f"{self.temperature!r}", param="temperature")
        for name in ("max_new_tokens", "min_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, not {value!r}", param=name)


@dataclass(frozen=True)
class AnswerRequest:
    """One response to decode. ``documents``: the retrieved documents' texts, in retrieval
    order; ``prompt(texts)``: the token ids of the whole prompt (template, query) holding those
    document texts, in that order (``prompt([])``: the prompt without retrieval); ``seed``: this
    response's own seed; ``scores``: each document's retrieval similarity where known (a
    private retrieval needs them); ``ids``: each document's id where known; ``datastore``:
    the whole datastore the system retrieves from, where the mechanism retrieves for itself
    (the DP votes from their shards, DP-RAG privately) for ``query``: its claim is then over
    the datastore's documents, not over ``documents``."""

    documents: tuple[str, ...]
    prompt: Callable[[Sequence[str]], list[int]] = field(compare=False)
    seed: int = 0
    scores: tuple[float, ...] | None = None
    ids: tuple[str, ...] | None = None
    query: str = ""
    datastore: Datastore | None = field(default=None, compare=False)


@dataclass(frozen=True)
class MechanismAnswer:
    """One decoded response: its token ids (the stopping EOS left out), whether it stopped on
    EOS, the whole response's :class:`Claim`, the released tokens that paid privacy budget, one
    plain-data record per step (at least ``token_id`` and ``paid``) and the indices of the
    request's documents that reached any prompt (a private retrieval may drop some);
    ``ledger``: a mechanism that decodes by Context Influence Decoding gives its CID ledger
    (:class:`~ctxleak.mitigations.ledger.RowLedger`: each token's λ_t and log-probabilities with
    and without the documents), None otherwise; ``datastore_used``: the ids of the datastore's
    documents that reached any prompt, where the mechanism retrieved from a datastore."""

    response_ids: tuple[int, ...]
    stopped_on_eos: bool
    claim: Claim
    tokens_paid: int
    steps: tuple[Mapping[str, Any], ...] = ()
    documents_used: tuple[int, ...] = ()
    ledger: RowLedger | None = None
    datastore_used: tuple[str, ...] = ()
    #: where the answer's figures are computed after its release (a served model's own sample,
    #: scored with and without the documents afterwards): the call that computes them
    later: Callable[[], MechanismAnswer] | None = field(default=None, compare=False)

    @property
    def released(self) -> int:
        """The released tokens, the stopping EOS included (as CID's ledger counts them)."""
        return len(self.response_ids) + int(self.stopped_on_eos)

    @property
    def rounds_opened(self) -> int:
        """The sparse-vector rounds the answer opened (its steps' ``round``), the one still open
        when it ended included; 0 for a mechanism without rounds."""
        return len({s["round"] for s in self.steps if s.get("round") is not None})

    @property
    def eps_used(self) -> float:
        """The ε its noisy steps used, the sum of its steps' ``eps_step`` (a sparse vote's open
        last round included; above the claim's ε where the claim composes them more tightly
        than a sum, as DP-RAG's does)."""
        return math.fsum(float(s.get("eps_step") or 0.0) for s in self.steps)

    @property
    def numbers_ok(self) -> bool:
        """Whether no log-probability, influence or ex-post ε of the answer's CID ledger is NaN
        (a model or server that failed); an answer without a ledger has none."""
        entries = self.ledger.entries if self.ledger is not None else ()
        return not any(v is not None and math.isnan(float(v)) for e in entries
                       for v in (e.logp_context, e.logp_empty, e.influence, e.eps_ex_post))


@dataclass(frozen=True)
class Charge:
    """What an answer holds of each private document before it is decoded, and what it is
    charged after: ``per_answer`` ε (a claim's, whatever the tokens), or ``per_token`` ε for
    each released token (bounded CID: an answer of up to L tokens reserves ε·(L + 1), the
    stopping EOS included), or neither and ``ex_post`` (plain CID: no guarantee, an ex-post
    figure the operator may charge); ``reads``: whether the answer reads its documents at all
    (CID at λ = 0 does not); ``events``: the Rényi-DP events of one charged unit, for a ledger
    that composes in Rényi DP."""

    per_answer: float | None = None
    per_token: float | None = None
    ex_post: bool = False
    reads: bool = True
    #: the Rényi-DP events of one charged unit (an answer per answer, a token per token); None:
    #: none (an (ε, δ) mechanism, or no guarantee)
    events: Events | None = None

    @property
    def guaranteed(self) -> bool:
        """Whether the charge is a DP guarantee's ε (per answer or per token)."""
        return self.per_answer is not None or self.per_token is not None


@dataclass(frozen=True)
class Asked:
    """One answer asked of a mechanism: the mechanism (its settings), the request and the
    decoding settings."""

    mechanism: Mechanism
    request: AnswerRequest
    decoding: Decoding


class Listener(Protocol):
    """Hears the answers of one ``answer_group`` call as they are decided: ``token(k, id,
    spent)`` for each released token of answer k (``spent`` the ε it spent under its charge,
    None where it has none; CID announces its stopping EOS too, a mechanism that answers whole
    announces its response's tokens), ``done(k, answer)`` once answer k is whole (possibly
    before the others)."""

    def token(self, k: int, token_id: int, spent: float | None) -> None: ...

    def done(self, k: int, answer: MechanismAnswer) -> None: ...


class Mechanism(Protocol):
    """A mechanism between the documents and the answer (the module docstring's contract); a
    subclass inherits the words with a default."""

    name: ClassVar[str]
    #: the fewest documents a request needs (a vote over shards needs one per shard)
    min_documents: ClassVar[int]
    #: whether it may answer over a whole datastore (``AnswerRequest.datastore``), retrieving
    #: for itself, rather than from the documents a request gives
    over_datastore: ClassVar[bool] = True
    #: the run options that set it in an influence sweep, where it is the run's own decoding
    #: and not one of its listed mechanisms (CID: ``lambda_`` and ``bounded_eps``); none by
    #: default
    swept_by: ClassVar[tuple[str, ...]] = ()

    def key(self) -> str:
        """The mechanism and its parameters, e.g. ``dp-vote(eps=2,shards=4)``: a setting's
        key in a sweep."""
        ...

    def describe(self) -> str:
        """The mechanism in a few words for a report (default: ``the mechanism`` and its
        :meth:`key`)."""
        return f"the mechanism {self.key()}"

    def claim(self, decoding: Decoding) -> Claim:
        """The most a whole response decoded with ``decoding`` may spend (each answer states
        what it did spend)."""
        ...

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        """One answer per request, in order (the module docstring's contract)."""
        ...

    def spent(self, composed_eps: float | None, released: int) -> tuple[Claim, int]:
        """What one answer claims and the released tokens that paid for it, from the ε its CID
        ledger composed (None: none) and its ``released`` tokens, the stopping EOS included
        (default: no guarantee and nothing paid; a mechanism without a ledger states its claim
        on its answer)."""
        return Claim(None), 0

    def charge(self, decoding: Decoding) -> Charge:
        """What an answer reserves and is charged (default: its claim's ε per answer, and
        :meth:`renyi_events`)."""
        return Charge(per_answer=claim_of(self, decoding).eps, events=self.renyi_events(decoding))

    def renyi_events(self, decoding: Decoding) -> Events | None:
        """The Rényi-DP events one whole answer composes from, for any one document, where the
        mechanism has them (None by default: an (ε, δ) claim without a Rényi curve)."""
        return None

    def mode(self) -> str:
        """The answer's mode as a response names it (default: ``mechanism``)."""
        return "mechanism"

    def batch_key(self, decoding: Decoding) -> Hashable:
        """Which answers one :meth:`answer_group` call may take together (default: the same
        mechanism, by its key, and the same decoding settings)."""
        return self.key(), decoding

    def answer_group(self, lm: LanguageModel, asked: Sequence[Asked],
                     listener: Listener | None = None) -> list[MechanismAnswer]:
        """One answer per asked, in order, for answers of one :meth:`batch_key`, each
        announced to ``listener`` (default: one ``answer`` call, each answer's tokens and the
        answer announced once it is whole; the stopping EOS is not announced)."""
        first = asked[0]
        answers = first.mechanism.answer(lm, [a.request for a in asked], first.decoding)
        if listener is not None:
            for k, answer in enumerate(answers):
                for token in answer.response_ids:
                    listener.token(k, token, None)
                listener.done(k, answer)
        return answers

    def figures(self, answer: MechanismAnswer, request: AnswerRequest,
                decoding: Decoding) -> dict[str, Any]:
        """What ``answer`` reports of itself as plain data (default: the mechanism, its claim
        at ``decoding`` and what the answer spent, its tokens and the documents it used)."""
        claim, spent = claim_of(self, decoding), answer.claim
        used = list(answer.datastore_used) if request.datastore is not None else \
            [request.ids[i] for i in answer.documents_used
             if request.ids is not None and 0 <= i < len(request.ids)]
        return {"mode": self.mode(), "mechanism": self.key(), "relation": spent.relation,
                "epsilon": claim.eps, "delta": claim.delta, "epsilon_spent": spent.eps,
                "delta_spent": spent.delta if spent.eps is not None else None,
                "epsilon_ex_post": None, "token_ids": list(answer.response_ids),
                "tokens": answer.released, "tokens_paid": answer.tokens_paid,
                "stopped_on_eos": answer.stopped_on_eos,
                "documents_used": list(dict.fromkeys(used))}

    def documents_needed(self) -> int:
        """The fewest documents one answer reads (a request's, or a datastore's where it
        retrieves from one), one per shard where it partitions them; ``min_documents`` by
        default."""
        return self.min_documents

    def streams(self, documents: int, over_datastore: bool) -> int:
        """The prompt streams one answer keeps in flight for a request of ``documents``
        documents (``over_datastore``: retrieving from the request's datastore); by default one
        per document and the prompt without retrieval."""
        return documents + 1

    def document_charges(self, request: AnswerRequest, decoding: Decoding
                         ) -> Mapping[str, Loss] | None:
        """Each datastore document's individual privacy loss in the answer to ``request`` (a
        :class:`Loss`, under the claim's relation), known before the answer is decoded: what a privacy filter
        charges it ("Individual Privacy Accounting via a Rényi Filter", Feldman and Zrnic;
        "Privacy Odometers and Filters: Pay-as-you-Go Composition", Rogers, Roth, Ullman and
        Vadhan). A document not named costs 0: adding or removing it cannot change the
        answer's distribution (a vote's shard whose voter reads another document). It must be
        computed from the request's own seed and datastore exactly as ``answer`` will decode
        them. None (the default, and for a request without a datastore): every document is
        charged the claim's ε."""
        return None

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> list[DocumentLoss] | None:
        """This mechanism's own ex-post privacy loss of each of the datastore's ``documents``
        in ``answer`` (decoded for ``request`` with ``decoding``), in order, where it has one
        (:mod:`~ctxleak.mitigations.document_loss`); None by default."""
        return None


def claim_of(mechanism: Mechanism, decoding: Decoding) -> Claim:
    """``mechanism.claim(decoding)``, kept per mechanism and settings: a claim depends on them
    only, and DP-RAG's bisection of its per-token ε takes about 11 ms (2-core CPU), too long to
    repeat for every answer of a deployment. A mechanism that cannot be a key is asked each
    time."""
    try:
        hash(mechanism)
    except TypeError:
        return mechanism.claim(decoding)
    return _kept_claim(mechanism, decoding)  # type: ignore[arg-type]  # hashed above


@lru_cache(maxsize=256)
def _kept_claim(mechanism: Mechanism, decoding: Decoding) -> Claim:  # claim_of's cache
    return mechanism.claim(decoding)


@dataclass(frozen=True)
class DocumentLoss:
    """The ex-post privacy loss one answer spent on ``document``
    (:mod:`~ctxleak.mitigations.document_loss`), in nats: ``retrieval`` (DP-RAG's threshold; 0
    for the votes), ``steps`` (one per released step, a sparse-vector round's loss on the step
    that ends it) and their ``total``; ``claim``: what the mechanism guarantees per response;
    ``changed``: what removing the document changed; ``check``: how far the recomputation of
    the recorded steps lands from the record (DP-RAG: the largest |Δ log P| of a released
    token, nats; the votes: the steps whose recomputed vote of the document's voter differs
    from the recorded one)."""

    document: str
    mechanism: str
    claim: Claim
    retrieval: float
    steps: tuple[float, ...]
    changed: str
    check: float

    @property
    def total(self) -> float:
        return self.retrieval + math.fsum(self.steps)

    @property
    def within(self) -> bool:
        """:func:`within_claim` of the total."""
        return within_claim(self.total, self.claim.eps)

    def describe(self) -> str:
        bound = "within" if self.within else "beyond"
        return (f"{self.mechanism} spent {self.total:.3g} nats of privacy loss on {self.document} "
                f"in this answer ({self.changed}), {bound} its claim ε = {self.claim.eps:.3g} per "
                f"response ({self.claim.relation})")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "claim": asdict(self.claim), "total": self.total,
                "within": self.within}


def refuse_greedy(mechanism: Mechanism, decoding: Decoding) -> None:
    """A :class:`ConfigError` where ``decoding`` asks a mechanism that samples by its
    definition (a noisy vote, an exponential mechanism) for greedy decoding."""
    if decoding.greedy:
        raise ConfigError(f"{mechanism.key()} samples by its definition: greedy decoding is "
                          "Context Influence Decoding's and scrubbing's only", param="greedy")
