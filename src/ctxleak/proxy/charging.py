"""What an answer of the privacy proxy charges to each document's budget, in the two steps of
:mod:`ctxleak.proxy.budget`'s contract: reserve before decoding the most the answer may spend,
settle after it what it spent. No token is drawn before its reservation is recorded. What to
reserve and charge is the mechanism's :class:`~ctxleak.mitigations.mechanisms.Charge`:

* per token: bounded Context Influence Decoding (Estimating Privacy Leakage of Augmented
  Contextual Knowledge in Language Models, App. B, Alg. 1, Thm B.1) releases each token ε-DP
  with respect to any one document, so an answer may spend ε × (max_tokens + 1) of each (the
  stopping EOS included) and spends ε per released token;
* per answer: a mechanism's claim (a DP vote, DP-RAG), whatever the claim's relation;
* ex post: plain CID (a fixed λ) has no guarantee: its ex-post ε is recorded, and charged only
  when the operator says so (``charge_ex_post``); a mechanism without a claim (scrubbing) is not
  charged.

Documents of class ``public`` are never charged. The response's figures are what the ledger
charged."""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool

from ctxleak.errors import ConfigError, CtxleakError
from ctxleak.mitigations.mechanisms import AnswerRequest, Charge
from ctxleak.proxy.answering import Reply, refusal
from ctxleak.proxy.budget import TOLERANCE, BudgetLedger, Reservation, answers_allowed
from ctxleak.proxy.callers import Caller
from ctxleak.proxy.chat_request import ChatRequest
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.fields import answer_fields, logged
from ctxleak.proxy.held import (
    Held,
    budget_spent,
    caller_share_spent,
    claim_never_fits,
    flag_public,
    never_fits,
    share_warnings,
)
from ctxleak.proxy.ledger_common import common_part, scope_of
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.public import store_of
from ctxleak.proxy.request import ProxyError

log = logging.getLogger("ctxleak.proxy")


class NotANumber(CtxleakError):
    """A decoded answer whose figures are NaN: the model (or its server) failed."""


class Charging:
    """The proxy's charging of the budget ledger, counted in its metrics and logged."""

    def __init__(self, ledger: BudgetLedger, config: ProxyConfig,
                 metrics: ProxyMetrics) -> None:
        self.ledger, self.config, self.metrics = ledger, config, metrics
        #: how a document's answers compose, and its budgets in the ledger's unit
        self.composition = config.composition
        self.budgets = self.composition.budgets(config.budgets)
        #: the datastores' scopes attached to the ledger's common row by this process
        self._attached: set[str] = set()
        #: the fraction of a document's budget one caller may hold (None: no share limit)
        self.share = config.caller_share if config.caller_share < 1 else None
        ledger.keep_unit(self.composition.unit())

    async def reserve(self, rid: str, request: ChatRequest,
                      caller: Caller | None = None) -> Held:
        """Reserve the budget the answer may spend before anything is decoded, as its
        mechanism's :class:`~ctxleak.mitigations.mechanisms.Charge` says: a claim's ε per
        answer; ε per token the answer may release (bounded CID); for plain CID charged ex post
        (``charge_ex_post``) ``ex_post_reserve`` per token or the whole remaining budget; an
        answer with no ε charged reserves nothing (:meth:`_uncharged`). A document whose budget
        could never cover it is refused with HTTP 400 (``on_unfittable``); one whose budget is
        spent is dropped, or the whole request refused with HTTP 429
        (``on_exhausted="refuse"``). ``caller``: whose reservation it is; with a
        ``caller_share`` below 1, a document of which it has spent its share is dropped (or
        HTTP 429 ``caller_share_spent``), whatever other callers left of it."""
        ids, classes, public, private = await self._classes(request)
        charge = request.charge
        if not (charge.guaranteed or (charge.ex_post and self.config.charge_ex_post)):
            return await self._uncharged(rid, request, ids, public, private, classes)
        if request.datastore is not None and charge.per_answer is not None:
            held = await self._individual(rid, request, ids, public, classes, caller)
            if held is not None:
                return held
        per_answer, per_token = self.units(request)
        if per_answer is not None:
            need, hold_rest = per_answer, False
        else:
            need, hold_rest = 0.0 if per_token is None else \
                per_token * (request.max_tokens + 1), per_token is None
        warnings = () if hold_rest else self._unfittable(request, need, private, classes)
        refuse = self.refuses(request, self.config.on_exhausted)
        res = await self._reserve(rid, private, need, classes, caller, all_or_nothing=refuse,
                                  hold_rest=hold_rest)
        self._left_out(res, caller, refuse)
        warnings += share_warnings(res.over_share)
        kept = set(res.granted) | set(public)
        dropped = [i for i in ids if i not in kept]
        self.metrics.dropped.inc(len(dropped))
        return Held(rid, ids, flag_public([d for d in request.documents if d.id in kept],
                                          public), dropped, True,
                    dict(res.held), public, dict(classes), warnings, res.over_share,
                    renyi_token=per_token if self.composition.renyi else None)

    async def _individual(self, rid: str, request: ChatRequest, ids: list[str],
                          public: tuple[str, ...], classes: Mapping[str, str],
                          caller: Caller | None) -> Held | None:
        """Individual per-document accounting over the datastore, as a privacy filter
        ("Individual Privacy Accounting via a Rényi Filter", Feldman and Zrnic): each private
        document is reserved what this answer can cost it (the mechanism's
        ``document_charges``, computed from the answer's own seed: 0 for a document that cannot
        change the answer, which is not written to the ledger), and a document whose budget
        that would pass is left out before the answer; leaving it out can change what the
        others are charged (a vote's shard reads its next best), so the charges are computed
        again until every one fits (a document this caller's share no longer covers is left
        out the same way, for this caller only). None: the mechanism has no individual
        charges."""
        mechanism, decoding, kept = request.mechanism, request.decoding, set(ids)
        public_ids, out, over = set(public), list[str](), list[str]()
        everyone = [d.id for d in request.documents if d.id not in public_ids]
        totals: dict[str, float] = {}
        while True:  # the private documents the mechanism would retrieve from (prepare's store)
            data = request.datastore
            store = store_of(data.documents if data is not None and not public_ids and
                             len(kept) == len(ids) else  # (all of it: as it is)
                             tuple((d.id, d.text) for d in request.documents
                                   if d.id in kept and d.id not in public_ids))
            asked = AnswerRequest(documents=(), prompt=lambda texts: [], seed=request.seed or 0,
                                  query=request.question, datastore=store)
            try:
                charges = None if store is None else mechanism.document_charges(asked, decoding)
            except ConfigError as exc:
                raise refusal(exc, request) from None
            if charges is None and store is not None:
                return None
            amounts: dict[int, float] = {}  # (a loss shared by many documents: once)
            own = {d: amounts.get(id(loss)) or amounts.setdefault(
                       id(loss), self._amount(request, loss.eps, loss.events))
                   for d, loss in (charges or {}).items() if d not in public_ids}
            own = {d: a for d, a in own.items() if a > 0}
            held_ids = [] if store is None else [i for i, _ in store.documents]
            common = common_part(own, held_ids)
            if common > 0:  # one row for what every document is charged alike (and caller)
                res, totals = await self._reserve_common(rid, own, common, everyone, held_ids,
                                                         classes, caller)
            else:
                res = await self._reserve(rid, list(own), own, classes, caller,
                                          all_or_nothing=True)
            if not (res.exhausted or res.over_share):
                break
            # (never refused: over a datastore, a refusal would tell about one document)
            self._left_out(res, caller, False)
            out.extend([*res.exhausted, *res.over_share])
            over.extend(res.over_share)
            kept -= {*res.exhausted, *res.over_share}
        self.metrics.dropped.inc(len(out))
        return Held(rid, ids, flag_public([d for d in request.documents if d.id in kept],
                                          public), out, True,
                    dict(res.held), public, dict(classes), share_warnings(over), tuple(over),
                    individual=True, common=res.common,
                    common_docs=len(held_ids) if res.common else 0,
                    totals=totals if res.common else {})

    async def _reserve_common(self, rid: str, own: Mapping[str, float], common: float,
                              everyone: list[str], ids: list[str], classes: Mapping[str, str],
                              caller: Caller | None = None
                              ) -> tuple[Reservation, dict[str, float]]:
        """Reserve ``common`` of each of ``ids`` (the private documents the answer reads) in
        the ledger's one common row of the datastore's private documents ``everyone``
        (:mod:`~ctxleak.proxy.ledger_common`; attached once per process) and each document's
        loss above it in its own row: the reservation and each row document's whole loss."""
        scope = scope_of(everyone)
        if scope not in self._attached:
            budgets = {i: self.budgets.of(i, classes.get(i)) for i in everyone}
            await run_in_threadpool(self.ledger.attach, scope, budgets,
                                    {i: classes[i] for i in everyone if i in classes})
            self._attached.add(scope)
        extra = {d: a - common for d, a in own.items() if a - common > TOLERANCE}
        res = await run_in_threadpool(functools.partial(
            self.ledger.reserve_common, rid, scope, ids, common, extra, self.budgets,
            {i: classes[i] for i in extra if i in classes},
            None if caller is None else caller.name, self.share))
        return res, {d: own[d] for d in res.held}

    async def _reserve(self, rid: str, ids: list[str], amount: float | Mapping[str, float],
                       classes: Mapping[str, str], caller: Caller | None, *,
                       all_or_nothing: bool, hold_rest: bool = False) -> Reservation:
        """The ledger's reservation of ``amount`` of each of ``ids`` (their classes recorded)
        for ``caller`` within its share, off the event loop."""
        return await run_in_threadpool(functools.partial(
            self.ledger.reserve, rid, ids, amount, self.budgets, all_or_nothing=all_or_nothing,
            classes={i: classes[i] for i in ids if i in classes}, hold_rest=hold_rest,
            caller=None if caller is None else caller.name, share=self.share))

    def _amount(self, request: ChatRequest, eps: float, events: Any) -> float:
        """A loss in the ledger's unit; HTTP 400 for one a Rényi ledger cannot hold."""
        amount = self.composition.amount(eps, events)
        if not math.isfinite(amount):
            raise ProxyError(400, f"ctxleak.mechanism: {request.mechanism.key()} has (ε, δ) "
                                  f"steps with no Rényi curve, and this proxy composes its "
                                  f"budgets in Rényi DP ({self.composition.unit()})",
                             param="ctxleak.mechanism", code="no_renyi_curve")
        return amount

    def units(self, request: ChatRequest) -> tuple[float | None, float | None]:
        """What the answer holds in the ledger's unit per answer and per token (each None where
        it is not charged that way): ε under basic composition (:meth:`per_token`), the Rényi
        divergence of the charge's events under Rényi composition."""
        charge = request.charge
        per_token = self.per_token(charge)
        if not self.composition.renyi or not charge.guaranteed:
            return charge.per_answer, per_token
        amount = self._amount(request, charge.per_answer or charge.per_token or 0.0,
                              charge.events)
        return (amount, None) if charge.per_answer is not None else (None, amount)

    def per_token(self, charge: Charge) -> float | None:
        """The ε per token an answer reserves: bounded CID's ε; plain CID's
        ``ex_post_reserve`` (None: it holds each document's whole remaining budget instead, or
        the charge is per answer)."""
        return charge.per_token if charge.per_token is not None else \
            self.config.ex_post_reserve if charge.ex_post else None

    async def _classes(self, request: ChatRequest
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
        budgets = self.budgets
        public = tuple(i for i in ids if budgets.public(i, classes.get(i)))
        private = [i for i in ids if i not in public]
        return ids, classes, public, private

    async def _uncharged(self, rid: str, request: ChatRequest, ids: list[str],
                         public: tuple[str, ...], private: list[str],
                         classes: Mapping[str, str]) -> Held:
        """An answer without a guarantee that is not charged (plain CID, scrubbing): a
        document with a budget is refused (HTTP 403), dropped or used uncharged, as the
        operator's ``unguaranteed`` says; with ``use``, one whose budget is spent (or 0) is
        still used by no further answer: dropped, or HTTP 429 (``on_exhausted="refuse"``)."""
        budgets = self.budgets
        policy = self.config.unguaranteed
        what = f"{request.mechanism.key()} (a claim without ε)"
        budgeted = [d for d in private if budgets.of(d, classes.get(d)) is not None] \
            if request.charge.reads else []
        if budgeted and policy == "refuse":
            raise ProxyError(403, f"ctxleak.documents: document(s) {', '.join(budgeted)} have "
                                  f"a privacy budget, and {what} carries no "
                                  f"guarantee and is not charged: ask with ctxleak.epsilon "
                                  f"(bounded CID) or a mechanism with an ε claim",
                             param="ctxleak.documents", kind="permission_error",
                             code="uncharged_on_budgeted")
        warnings: tuple[str, ...] = ()
        if budgeted and policy == "drop":
            out = budgeted
            warnings = (f"document(s) {', '.join(budgeted)} left out: they have a privacy "
                        f"budget and {what} is not charged",)
        else:
            def spent_out() -> list[str]:
                return [doc for doc in budgeted
                        if not self.ledger.document(doc).spent
                        < (budgets.of(doc, classes.get(doc)) or 0.0)]

            out = await run_in_threadpool(spent_out) if budgeted else []
            if out:
                self._exhausted(out, self.config.on_exhausted == "refuse")
        dropped = [i for i in ids if i in out]
        self.metrics.dropped.inc(len(dropped))
        # public documents are never written to the ledger, not even plain CID's ex-post ε
        return Held(rid, ids, flag_public([d for d in request.documents if d.id not in out],
                                          public), dropped,
                    False, public=public, classes=dict(classes), warnings=warnings)

    def _left_out(self, res: Reservation, caller: Caller | None, refuse: bool) -> None:
        """Count the documents ``res`` could not hold, their budget spent
        (:meth:`_exhausted`) or this caller's share of it (:meth:`_over_share`); HTTP 429
        where ``refuse``."""
        if res.exhausted:
            self._exhausted(res.exhausted, refuse)
        if res.over_share:
            self._over_share(res.over_share, caller, refuse)

    def _over_share(self, docs: Sequence[str], caller: Caller | None, refuse: bool) -> None:
        """Count documents refused for the caller's share; HTTP 429 where ``refuse``
        (:meth:`refuses`)."""
        self.metrics.share_spent.labels(caller.label if caller else "").inc(len(docs))
        if refuse:
            raise caller_share_spent(self.config.caller_share)

    @staticmethod
    def refuses(request: ChatRequest, policy: str) -> bool:
        """Whether ``policy`` (``on_exhausted``, ``on_unfittable``) refuses ``request``: an
        answer under a DP guarantee over the datastore never is, its documents are left out
        instead (a refusal naming, or caused by, one document of the datastore would tell the
        client about it outside the claim; leaving a document out is within it)."""
        return policy == "refuse" and not (request.datastore is not None
                                           and request.charge.guaranteed)

    def _exhausted(self, exhausted: Sequence[str], refuse: bool) -> None:
        """Count documents found exhausted; HTTP 429 where ``refuse``."""
        self.metrics.exhausted.labels("refuse" if refuse else "drop").inc(len(exhausted))
        if refuse:
            raise budget_spent(f"the privacy budget of document(s) {', '.join(exhausted)} "
                               f"is spent")

    def _unfittable(self, request: ChatRequest, need: float, private: list[str],
                    classes: Mapping[str, str]) -> tuple[str, ...]:
        """HTTP 400 (or, with ``on_unfittable="drop"``, warnings) for the documents whose whole
        budget, above 0, is less than this answer's reservation ``need`` (a budget of 0 is no
        mistake): on ``max_tokens`` for an ε per token (:func:`never_fits`), else on
        ``ctxleak.mechanism`` for a claim per answer."""
        per_token = self.per_token(request.charge)
        param = "max_tokens" if request.charge.per_answer is None and per_token is not None \
            else "ctxleak.mechanism"
        said = []
        for doc in private:
            budget = self.budgets.of(doc, classes.get(doc))
            if budget is None or not 0 < budget or not need > budget + TOLERANCE:
                continue
            if param == "max_tokens" and per_token is not None and not self.composition.renyi:
                said.append(never_fits(doc, budget, per_token, request.max_tokens))
            else:
                said.append(claim_never_fits(doc, budget, need, request, self.composition))
        if said and self.refuses(request, self.config.on_unfittable):
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

    async def settle_drawn(self, held: Held, drawn: Sequence[float | None]) -> None:
        """A streamed answer that failed midway: the tokens already sent are spent (``drawn``:
        what each spent under its charge: bounded CID's ε, else its ex-post ε)."""
        if held.charged:
            total = float(sum(x or 0.0 for x in drawn)) if held.renyi_token is None else \
                held.renyi_token * sum(x is not None for x in drawn)
            if math.isnan(total):  # a figure the model could not give: all it reserved
                total = held.most
            await run_in_threadpool(self.ledger.settle, held.rid, total)

    async def settle(self, request: ChatRequest, reply: Reply, held: Held) -> dict[str, Any]:
        """Charge what the answer spent under its mechanism's charge (bounded CID's composed ε,
        a mechanism's own claim, or plain CID's ex-post ε where the operator charges it), count
        it, log it; the response's ``ctxleak`` field, whose ``charged`` and ``epsilon_spent``
        are what the ledger charged each document. An answer whose log-probabilities hold NaN
        (a model or server that failed) is not released: :class:`NotANumber`, its whole
        reservation kept as spent."""
        rid, charge, figures = held.rid, request.charge, reply.figures
        if not reply.answer.numbers_ok:
            if held.charged:
                await run_in_threadpool(self.ledger.settle, rid, held.most)
            raise NotANumber("the model's log-probabilities hold NaN (not a number): the "
                             "answer is not released")
        charged: dict[str, float] | None = None
        if held.charged:  # (the server sampled at λ = 1: no ex-post figure, nothing charged)
            own = figures["epsilon_spent"] if charge.guaranteed else \
                (figures["epsilon_ex_post"] or 0.0)
            spent = float(own if own is not None else held.most)
            if self.composition.renyi and charge.guaranteed:  # in the ledger's unit
                per_answer, per_token = self.units(request)
                spent = per_answer if per_answer is not None else \
                    reply.tokens * float(per_token or 0.0)
            # individual charges: each document spends what it held (its loss was fixed before
            # the answer, from the answer's own seed)
            await run_in_threadpool(self.ledger.settle, rid,
                                    dict(held.held) if held.individual else spent)
            charged = dict(held.held) if held.individual else {doc: spent for doc in held.held}
            over = [d for d, h in held.held.items()
                    if charged[d] > h + TOLERANCE]
            if over:  # a spend above its reservation: charged in full, said
                log.warning(json.dumps({"event": "over_reservation", "id": rid,
                                        "documents": over, "epsilon": spent}))
            if held.common:  # each row document's whole loss; the rest charged the common
                charged = dict(held.totals)
            total = sum(charged.values()) + held.common * (held.common_docs - len(charged))
            self.metrics.eps.inc(total if charge.guaranteed else 0.0)
        private = [d.id for d in held.docs if d.id not in held.public]
        ex_post = figures.get("epsilon_ex_post")
        if charge.ex_post and private and ex_post is not None:
            await run_in_threadpool(self.ledger.record_ex_post, private, ex_post)
            self.metrics.eps_ex_post.inc(ex_post * len(private))
        self.metrics.tokens.labels(request.mechanism.mode()).inc(reply.tokens)
        info = answer_fields(request, reply, held, charged)
        info["budgets"] = await run_in_threadpool(self.budget_rows, request, held)
        event = "mechanism" if request.mechanism.mode() == "mechanism" else "cid"
        log.info(json.dumps({"event": event, "id": rid, **logged(info, request)}))
        return info

    def budget_rows(self, request: ChatRequest, held: Held) -> dict[str, dict[str, Any]]:
        """Each charged document's budget after this answer: its class, budget, ε spent and
        left, and how many more answers like this one (same ε and max_tokens, or the same
        mechanism's claim) it allows."""
        per_answer, per_token = self.units(request)
        tokens = request.max_tokens
        if per_answer is not None:
            per_token, tokens = per_answer or None, 0  # a claim is per answer
        out: dict[str, dict[str, Any]] = {}
        for doc in held.held:
            row = self.ledger.document(doc)
            left = row.remaining
            out[doc] = {"class": row.doc_class, "budget": row.budget, "spent": row.spent,
                        "remaining": left,
                        "answers_left": None if left is None or per_token is None
                        else answers_allowed(max(left, 0.0), per_token, tokens)}
        return out
