"""What a CID answer of the privacy proxy charges to each document's budget, in the two steps of
:mod:`ctxleak.proxy.budget`'s contract: reserve before decoding the most the answer may spend,
settle after it what it spent. No token is drawn before its reservation is recorded.

Bounded Context Influence Decoding (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, App. B, Alg. 1, Thm B.1) releases each token ε-DP with respect to
any one document, so an answer may spend ε × (max_tokens + 1) of each (the stopping EOS
included) and spends ε per released token. Plain CID (a fixed λ) has no guarantee: its ex-post ε
is recorded, and charged only when the operator says so (``charge_ex_post``). Documents of class
``public`` are never charged. The response's figures are what the ledger charged."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from ctxleak.errors import CtxleakError
from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.budget import TOLERANCE, BudgetLedger, Budgets, answers_allowed
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import Answer
from ctxleak.proxy.mechanism import Reply, mechanism_fields
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import (
    CIDRequest,
    Document,
    MechanismRequest,
    ProxyError,
)

log = logging.getLogger("ctxleak.proxy")

GUARANTEE = ("bounded CID: each released token (the stopping EOS included) is ε-DP with respect "
             "to any one document of the context, so this answer spends epsilon_spent of each "
             "document in documents (basic composition)")
NO_GUARANTEE = ("plain CID (a fixed λ) has no DP guarantee: epsilon_ex_post is 2·max_y |log "
                "p̄_λ(y|D) − log p(y|∅)| summed over tokens, a figure about this context alone "
                "(null at λ = 1 and T = 1 through a served model, whose server samples the "
                "answer itself)")


#: A request the proxy charges: answered by CID, or by another mechanism.
AnyRequest = CIDRequest | MechanismRequest


def mode_of(request: AnyRequest) -> str:
    """The answer's mode: ``bounded`` CID, plain CID (``lambda``), or another ``mechanism``."""
    if isinstance(request, MechanismRequest):
        return "mechanism"
    return "bounded" if request.eps is not None else "lambda"


class NotANumber(CtxleakError):
    """A decoded answer whose figures are NaN: the model (or its server) failed."""


def answer_is_numbers(answer: Answer) -> bool:
    """Whether no log-probability, influence or ex-post ε of ``answer`` is NaN."""
    values = [v for e in answer.ledger.entries
              for v in (e.logp_context, e.logp_empty, e.influence, e.eps_ex_post)
              if v is not None]
    return not any(math.isnan(float(v)) for v in values)


@dataclass(frozen=True)
class Held:
    """What one answer holds of the budgets: its request id ``rid``, the request's document ids
    (each once, in order), the documents it may decode with, the ids dropped for their budget,
    whether a reservation was charged (bounded CID, or ``charge_ex_post``), what each charged
    document holds, the public documents (never charged), each document's class where known,
    and the warnings the response carries."""

    rid: str
    ids: list[str]
    docs: list[Document]
    dropped: list[str]
    charged: bool
    held: Mapping[str, float] = field(default_factory=dict)
    public: tuple[str, ...] = ()
    classes: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _what(request: AnyRequest) -> str:
    """The answer's defence in words, for an error."""
    if isinstance(request, MechanismRequest):
        return f"{request.mechanism.key()} (a claim without ε)"
    return f"plain CID (ctxleak.lambda {request.lam:g})"


def per_token_reserve(request: CIDRequest, config: ProxyConfig) -> float | None:
    """The ε per token an answer reserves: bounded CID's ε; plain CID's ``ex_post_reserve``
    (None: it holds each document's whole remaining budget instead)."""
    return request.eps if request.eps is not None else config.ex_post_reserve


def never_fits(doc_id: str, budget: float, per_token: float, max_tokens: int) -> str:
    """Why an answer of up to ``max_tokens`` tokens at ``per_token`` ε can never use a
    document of budget ``budget``, with the arithmetic and what would fit."""
    need = per_token * (max_tokens + 1)
    fit = answers_allowed(budget, per_token, 0) - 1  # the most tokens one answer may have
    longest = (f"max_tokens ≤ {fit} ({per_token:g} × {fit + 1} = {per_token * (fit + 1):g})"
               if fit >= 1 else "no max_tokens")
    return (f"the reservation ε × (max_tokens + 1) = {per_token:g} × {max_tokens + 1} = "
            f"{need:g} is more than document {doc_id!r}'s whole budget of {budget:g}, so this "
            f"request could never use it: ask for {longest} at this ε, or ε ≤ "
            f"{budget / (max_tokens + 1):.4g} at this max_tokens, or raise the budget")


def budget_spent(message: str) -> ProxyError:
    """HTTP 429 ``budget_exhausted`` on ``ctxleak.documents``: ``message`` says whose budget
    is spent."""
    return ProxyError(429, message, param="ctxleak.documents", kind="insufficient_quota",
                      code="budget_exhausted")


def sizing_text(budgets: Budgets, max_tokens: int,
                examples: Sequence[float] = (0.05, 0.1, 0.5)) -> str:
    """The budgets' arithmetic in words, for ``ctxleak serve``'s start line: what each budget is
    and how many answers of up to ``max_tokens`` tokens it allows at a few ε per token."""
    named = [("every document", budgets.default), *((f"class {c}", b)
                                                    for c, b in budgets.classes.items()),
             *((f"document {d}", b) for d, b in budgets.overrides.items())]
    limited = [(who, b) for who, b in named if b is not None]
    head = ("an answer of up to L tokens at ε per token reserves ε·(L+1) of each private "
            "document (the stopping EOS included), so a budget B allows ⌊B / (ε·(L+1))⌋ "
            "answers; class public is never charged")
    if not limited:
        return f"budgets: none (ε is recorded, not limited); {head}"
    parts = []
    for who, b in limited:
        allowed = ", ".join(f"{answers_allowed(b, e, max_tokens)} at ε {e:g}" for e in examples)
        parts.append(f"{who}: {b:g} → answers of {max_tokens} tokens: {allowed}")
    return f"budgets: {'; '.join(parts)} ({head})"


class Charging:
    """The proxy's charging of the budget ledger, counted in its metrics and logged."""

    def __init__(self, ledger: BudgetLedger, config: ProxyConfig,
                 metrics: ProxyMetrics) -> None:
        self.ledger, self.config, self.metrics = ledger, config, metrics

    async def reserve(self, rid: str, request: CIDRequest) -> Held:
        """Reserve the budget the answer may spend before anything is decoded: ε per token the
        answer may release (bounded), or for plain CID charged ex post ``ex_post_reserve`` per
        token or the whole remaining budget. A document whose budget could never cover it is
        refused with HTTP 400 (``on_unfittable``); one whose budget is spent is dropped, or the
        whole request refused with HTTP 429 (``on_exhausted="refuse"``)."""
        ids, classes, public, private = await self._classes(request)
        if not (request.eps is not None or self.config.charge_ex_post):
            return await self._uncharged(rid, request, ids, private, classes)
        warnings = self._unfittable(request, private, classes)
        per_token = per_token_reserve(request, self.config)
        amount = 0.0 if per_token is None else per_token * (request.max_tokens + 1)
        return await self._reserve(rid, request, ids, private, public, classes, amount,
                                   per_token is None, warnings)

    async def reserve_claim(self, rid: str, request: MechanismRequest) -> Held:
        """Reserve, before anything is decoded, the claim's ε (the most the whole answer may
        spend, :meth:`~ctxleak.mitigations.mechanisms.Mechanism.claim`) of each private
        document the request carries, whatever the claim's relation (document, context or
        shard); a claim without ε (scrubbing) reserves nothing, and a document whose budget is
        spent is dropped or refused as by plain CID. As :meth:`reserve`: HTTP 400 for a
        budget that could never cover it (``on_unfittable``), HTTP 429 with
        ``on_exhausted="refuse"``."""
        ids, classes, public, private = await self._classes(request)
        claim = request.claim
        if claim.eps is None:
            return await self._uncharged(rid, request, ids, private, classes)
        warnings = self._unfittable_claim(request, claim.eps, private, classes)
        return await self._reserve(rid, request, ids, private, public, classes, claim.eps,
                                   False, warnings)

    async def _classes(self, request: AnyRequest
                       ) -> tuple[list[str], dict[str, str], tuple[str, ...], list[str]]:
        """The request's document ids (each once, in order), their classes, the public ones and
        the private ones. A document's class is the operator's (``classes``, else the one the
        ledger holds): a client may repeat it, but a class it gives that differs, or that the
        operator never set, is HTTP 400 (first-come classes would let any client call a
        restricted document public)."""
        ids = list(dict.fromkeys(d.id for d in request.documents))
        given = {d.id: d.cls for d in request.documents if d.cls is not None}
        recorded = await run_in_threadpool(self.ledger.classes_of, ids)
        classes = {**recorded, **{i: self.config.classes[i] for i in ids
                                  if i in self.config.classes}}
        for doc, cls in given.items():
            if doc not in classes:
                raise ProxyError(400, f"ctxleak.documents: document {doc!r} is given class "
                                      f"{cls!r}, but document classes are the operator's "
                                      f"(ctxleak serve --classes FILE) and it has none",
                                 param="ctxleak.documents", code="class_not_set")
            if classes[doc] != cls:
                raise ProxyError(400, f"ctxleak.documents: document {doc!r} is given class "
                                      f"{cls!r}, but its class is {classes[doc]!r} (set by "
                                      f"the operator)",
                                 param="ctxleak.documents", code="class_conflict")
        budgets = self.config.budgets
        public = tuple(i for i in ids if budgets.public(i, classes.get(i)))
        private = [i for i in ids if i not in public]
        return ids, classes, public, private

    async def _reserve(self, rid: str, request: AnyRequest, ids: list[str], private: list[str],
                       public: tuple[str, ...], classes: Mapping[str, str], amount: float,
                       hold_rest: bool, warnings: tuple[str, ...]) -> Held:
        """Reserve ``amount`` of each private document (``hold_rest``: its whole remaining
        budget); the documents kept, those dropped (or HTTP 429)."""
        budgets = self.config.budgets
        refuse = self.config.on_exhausted == "refuse"
        res = await run_in_threadpool(
            lambda: self.ledger.reserve(rid, private, amount, budgets, all_or_nothing=refuse,
                                        classes={i: classes[i] for i in private if i in classes},
                                        hold_rest=hold_rest))
        if res.exhausted:
            self._exhausted(res.exhausted)
        kept = set(res.granted) | set(public)
        dropped = [i for i in ids if i not in kept]
        self.metrics.dropped.inc(len(dropped))
        return Held(rid, ids, [d for d in request.documents if d.id in kept], dropped, True,
                    dict(res.held), public, dict(classes), warnings)

    async def _uncharged(self, rid: str, request: AnyRequest, ids: list[str],
                         private: list[str], classes: Mapping[str, str]) -> Held:
        """An answer without a guarantee that is not charged (plain CID, scrubbing): a
        document with a budget is refused (HTTP 403), dropped or used uncharged, as the
        operator's ``unguaranteed`` says; with ``use``, one whose budget is spent (or 0) is
        still used by no further answer: dropped, or HTTP 429 (``on_exhausted="refuse"``)."""
        budgets = self.config.budgets
        policy = self.config.unguaranteed
        reads = not (isinstance(request, CIDRequest) and request.lam == 0.0)  # λ = 0: none
        budgeted = [d for d in private if budgets.of(d, classes.get(d)) is not None] \
            if reads else []
        if budgeted and policy == "refuse":
            raise ProxyError(403, f"ctxleak.documents: document(s) {', '.join(budgeted)} have "
                                  f"a privacy budget, and {_what(request)} carries no "
                                  f"guarantee and is not charged: ask with ctxleak.epsilon "
                                  f"(bounded CID) or a mechanism with an ε claim",
                             param="ctxleak.documents", kind="permission_error",
                             code="uncharged_on_budgeted")
        warnings: tuple[str, ...] = ()
        if budgeted and policy == "drop":
            out = budgeted
            warnings = (f"document(s) {', '.join(budgeted)} left out: they have a privacy "
                        f"budget and {_what(request)} is not charged",)
        else:
            def spent_out() -> list[str]:
                return [doc for doc in budgeted
                        if not self.ledger.document(doc).spent
                        < (budgets.of(doc, classes.get(doc)) or 0.0)]

            out = await run_in_threadpool(spent_out) if budgeted else []
            if out:
                self._exhausted(out)
        dropped = [i for i in ids if i in out]
        self.metrics.dropped.inc(len(dropped))
        return Held(rid, ids, [d for d in request.documents if d.id not in out], dropped,
                    False, classes=dict(classes), warnings=warnings)

    def _exhausted(self, exhausted: Sequence[str]) -> None:
        """Count documents found exhausted; HTTP 429 with ``on_exhausted="refuse"``."""
        refuse = self.config.on_exhausted == "refuse"
        self.metrics.exhausted.labels("refuse" if refuse else "drop").inc(len(exhausted))
        if refuse:
            raise budget_spent(f"the privacy budget of document(s) {', '.join(exhausted)} "
                               f"is spent")

    def _unfittable(self, request: CIDRequest, private: list[str],
                    classes: Mapping[str, str]) -> tuple[str, ...]:
        """HTTP 400 (or, with ``on_unfittable="drop"``, warnings) for the documents whose whole
        budget is less than this answer's reservation; a budget of 0 is no mistake."""
        per_token = per_token_reserve(request, self.config)
        if per_token is None:
            return ()

        def says(doc: str, budget: float) -> str:
            return never_fits(doc, budget, per_token, request.max_tokens)

        return self._over_budget(per_token * (request.max_tokens + 1), private, classes,
                                 "max_tokens", says)

    def _unfittable_claim(self, request: MechanismRequest, need: float, private: list[str],
                          classes: Mapping[str, str]) -> tuple[str, ...]:
        """:meth:`_unfittable` for a mechanism's claim ``need``: HTTP 400 (or warnings) for the
        documents whose whole budget is less than it."""
        def says(doc: str, budget: float) -> str:
            return (f"the reservation of {request.mechanism.key()} at max_tokens "
                    f"{request.max_tokens}, its claim ε = {need:g} per answer, is more "
                    f"than document {doc!r}'s whole budget of {budget:g}, so this "
                    f"request could never use it: raise the budget or deploy a "
                    f"mechanism with a smaller ε")

        return self._over_budget(need, private, classes, "ctxleak.mechanism", says)

    def _over_budget(self, need: float, private: list[str], classes: Mapping[str, str],
                     param: str, says: Callable[[str, float], str]) -> tuple[str, ...]:
        """HTTP 400 on ``param`` (or, with ``on_unfittable="drop"``, warnings) for the documents
        whose whole budget, above 0, is less than ``need``: ``says(doc, budget)`` words each."""
        said = []
        for doc in private:
            budget = self.config.budgets.of(doc, classes.get(doc))
            if budget is not None and 0 < budget and need > budget + TOLERANCE:
                said.append(says(doc, budget))
        if said and self.config.on_unfittable == "refuse":
            raise ProxyError(400, f"{param}: {said[0]}", param=param,
                             code="reservation_exceeds_budget")
        for text in said:
            log.warning(json.dumps({"event": "unfittable", "message": text}))
        return tuple(said)

    async def release_unspent(self, held: Held) -> None:
        """Nothing was released (the decoding failed before its first token): the reservation
        is given back."""
        if held.charged:
            await run_in_threadpool(self.ledger.settle, held.rid, 0.0)

    async def settle_drawn(self, request: CIDRequest, held: Held,
                           drawn: Sequence[LedgerEntry]) -> None:
        """A streamed answer that failed midway: the tokens already sent are spent (bounded: ε
        each; else their ex-post ε)."""
        if held.charged:
            spent = [e.eps if request.eps is not None else e.eps_ex_post for e in drawn]
            total = float(sum(x or 0.0 for x in spent))
            if math.isnan(total):  # a figure the model could not give: all it reserved
                total = max(held.held.values(), default=0.0)
            await run_in_threadpool(self.ledger.settle, held.rid, total)

    async def settle(self, request: CIDRequest, answer: Answer, held: Held) -> dict[str, Any]:
        """Charge what the answer spent, count it, log it; the response's ``ctxleak`` field,
        whose ``charged`` and ``epsilon_spent`` are what the ledger charged each document.
        An answer whose log-probabilities hold NaN (a model or server that failed) is not
        released: :class:`NotANumber`, its whole reservation kept as spent."""
        rid, docs = held.rid, held.docs
        if not answer_is_numbers(answer):
            if held.charged:
                await run_in_threadpool(self.ledger.settle, rid,
                                        max(held.held.values(), default=0.0))
            raise NotANumber("the model's log-probabilities hold NaN (not a number): the "
                             "answer is not released")
        bounded = request.eps is not None
        spent = answer.eps_spent if bounded else (answer.eps_ex_post_total or 0.0)
        charged: dict[str, float] = {}
        if held.charged:  # (the server sampled at λ = 1: no ex-post figure, nothing charged)
            await run_in_threadpool(self.ledger.settle, rid, float(spent or 0.0))
            charged = {doc: float(spent or 0.0) for doc in held.held}
            over = [d for d, h in held.held.items() if (spent or 0.0) > h + TOLERANCE]
            if over:  # an ex-post spend above its reservation: charged in full, said
                log.warning(json.dumps({"event": "over_reservation", "id": rid,
                                        "documents": over, "epsilon": spent}))
            self.metrics.eps.inc(sum(charged.values()) if bounded else 0.0)
        private = [d.id for d in docs if d.id not in held.public]
        if not bounded and private and answer.eps_ex_post_total is not None:
            await run_in_threadpool(self.ledger.record_ex_post, private,
                                    answer.eps_ex_post_total)
            self.metrics.eps_ex_post.inc(answer.eps_ex_post_total * len(private))
        mode = "bounded" if bounded else "lambda"
        self.metrics.tokens.labels(mode).inc(len(answer.ledger.entries))
        kept = {d.id for d in docs}
        info = ledger_fields(request, answer, [i for i in held.ids if i in kept], held.dropped,
                             charged=charged if held.charged else None)
        info["warnings"] = list(held.warnings)
        info["budgets"] = await run_in_threadpool(self.budget_rows, request, held)
        log.info(json.dumps({"event": "cid", "id": rid, "mode": mode, "documents": info[
            "documents"], "dropped": held.dropped, "tokens": info["tokens"],
            "epsilon_spent": info["epsilon_spent"], "epsilon_ex_post": info["epsilon_ex_post"]}))
        return info

    async def settle_mechanism(self, request: MechanismRequest, reply: Reply,
                               held: Held) -> dict[str, Any]:
        """Charge what the mechanism's answer says it spent (its own claim's ε,
        :attr:`~ctxleak.mitigations.mechanisms.MechanismAnswer.claim`) to each document
        reserved, count it, log it; the response's ``ctxleak`` field, whose ``charged`` and
        ``epsilon_spent`` are what the ledger charged each document."""
        rid, answer = held.rid, reply.answer
        charged: dict[str, float] = {}
        if held.charged:
            # an answer without a figure (never for a mechanism with a claim) keeps it all
            spent = answer.claim.eps if answer.claim.eps is not None else \
                max(held.held.values(), default=0.0)
            await run_in_threadpool(self.ledger.settle, rid, float(spent))
            charged = {doc: float(spent) for doc in held.held}
            over = [d for d, h in held.held.items() if spent > h + TOLERANCE]
            if over:  # a mechanism that spent more than it claimed: charged in full, said
                log.warning(json.dumps({"event": "over_reservation", "id": rid,
                                        "documents": over, "epsilon": spent}))
            self.metrics.eps.inc(sum(charged.values()))
        self.metrics.tokens.labels("mechanism").inc(reply.tokens)
        kept = {d.id for d in held.docs}
        info = mechanism_fields(request, reply, [i for i in held.ids if i in kept],
                                held.dropped, held.docs,
                                charged=charged if held.charged else None)
        info["warnings"] = list(held.warnings)
        info["budgets"] = await run_in_threadpool(self.budget_rows, request, held)
        log.info(json.dumps({"event": "mechanism", "id": rid, "mechanism": info["mechanism"],
                             "documents": info["documents"], "dropped": held.dropped,
                             "tokens": info["tokens"], "epsilon_spent": info["epsilon_spent"],
                             "delta_spent": info["delta_spent"]}))
        return info

    def budget_rows(self, request: AnyRequest, held: Held) -> dict[str, dict[str, Any]]:
        """Each charged document's budget after this answer: its class, budget, ε spent and
        left, and how many more answers like this one (same ε and max_tokens, or the same
        mechanism's claim) it allows."""
        if isinstance(request, MechanismRequest):
            per_token = request.claim.eps or None
            tokens = 0  # a claim is per answer: ⌊left / claim⌋
        else:
            per_token, tokens = per_token_reserve(request, self.config), request.max_tokens
        out: dict[str, dict[str, Any]] = {}
        for doc in held.held:
            row = self.ledger.document(doc)
            left = row.remaining
            out[doc] = {"class": row.doc_class, "budget": row.budget, "spent": row.spent,
                        "remaining": left,
                        "answers_left": None if left is None or per_token is None
                        else answers_allowed(max(left, 0.0), per_token, tokens)}
        return out


def ledger_fields(request: CIDRequest, answer: Answer, kept: list[str], dropped: list[str],
                  *, charged: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``ctxleak`` field of the response: how to read it is in docs/deploy-cid.md.
    ``charged``: what the ledger charged each document (None: nothing was reserved);
    ``epsilon_spent`` of a bounded answer is that charge (0 where no document was charged)."""
    ledger = answer.ledger
    spent = answer.eps_spent
    if request.eps is not None and charged is not None:
        spent = max(charged.values(), default=0.0)
    return {
        "mode": "bounded" if request.eps is not None else "lambda",
        "lambda": request.lam, "epsilon": request.eps,
        "temperature": request.temperature, "seed": answer.seed,
        "epsilon_spent": spent,
        "epsilon_ex_post": answer.eps_ex_post_total,
        "charged": dict(charged or {}),
        "influence": float(sum(e.influence for e in ledger.entries)),
        "guarantee": GUARANTEE if request.eps is not None else NO_GUARANTEE,
        "lambdas": ledger.lambdas,
        "token_ids": [e.token_id for e in ledger.entries],
        "tokens": len(ledger.entries), "stopped_on_eos": ledger.stopped_on_eos,
        "documents": kept, "dropped": dropped, "context_tokens_cut": answer.context_tokens_cut,
    }
