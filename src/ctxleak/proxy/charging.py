"""What a CID answer of the privacy proxy charges to each document's budget, in the two steps of
:mod:`ctxleak.proxy.budget`'s contract: reserve before decoding the most the answer may spend,
settle after it what it spent.

Bounded Context Influence Decoding (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, App. B, Alg. 1, Thm B.1) releases each token ε-DP with respect to
any one document, so an answer may spend ε × (max_tokens + 1) of each (the stopping EOS
included) and spends ε per released token. Plain CID (a fixed λ) has no guarantee: its ex-post ε
is recorded, and charged only when the operator says so (``charge_ex_post``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.budget import BudgetLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import Answer
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import CIDRequest, Document, ProxyError

log = logging.getLogger("ctxleak.proxy")

GUARANTEE = ("bounded CID: each released token (the stopping EOS included) is ε-DP with respect "
             "to any one document of the context, so this answer spends epsilon_spent of each "
             "document in documents (basic composition)")
NO_GUARANTEE = ("plain CID (a fixed λ) has no DP guarantee: epsilon_ex_post is 2·max_y |log "
                "p̄_λ(y|D) − log p(y|∅)| summed over tokens, a figure about this context alone "
                "(null at λ = 1 and T = 1 through a served model, whose server samples the "
                "answer itself)")


@dataclass(frozen=True)
class Held:
    """What one answer holds of the budgets: its request id ``rid``, the request's document ids
    (each once, in order), the documents it may decode with, the ids dropped for their budget,
    and whether a reservation was charged (bounded CID, or ``charge_ex_post``)."""

    rid: str
    ids: list[str]
    docs: list[Document]
    dropped: list[str]
    charged: bool


class Charging:
    """The proxy's charging of the budget ledger, counted in its metrics and logged."""

    def __init__(self, ledger: BudgetLedger, config: ProxyConfig,
                 metrics: ProxyMetrics) -> None:
        self.ledger, self.config, self.metrics = ledger, config, metrics

    async def reserve(self, rid: str, request: CIDRequest) -> Held:
        """Reserve the budget the answer may spend (bounded: ε per token the answer may
        release); a document whose budget cannot cover it is dropped, or the whole request
        refused with HTTP 429 (``on_exhausted="refuse"``)."""
        charge = request.eps is not None or self.config.charge_ex_post
        ids = list(dict.fromkeys(d.id for d in request.documents))
        kept = set(ids)
        if charge:
            amount = request.eps * (request.max_tokens + 1) if request.eps is not None else 0.0
            refuse = self.config.on_exhausted == "refuse"
            res = await run_in_threadpool(self.ledger.reserve, rid, ids, amount,
                                          self.config.budgets, all_or_nothing=refuse)
            if res.exhausted and refuse:
                raise ProxyError(429, f"the privacy budget of document(s) "
                                      f"{', '.join(res.exhausted)} is spent",
                                 param="ctxleak.documents", kind="insufficient_quota",
                                 code="budget_exhausted")
            kept = set(res.granted)
        dropped = [i for i in ids if i not in kept]
        self.metrics.dropped.inc(len(dropped))
        return Held(rid, ids, [d for d in request.documents if d.id in kept], dropped, charge)

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
            await run_in_threadpool(self.ledger.settle, held.rid,
                                    float(sum(x or 0.0 for x in spent)))

    async def settle(self, request: CIDRequest, answer: Answer, held: Held) -> dict[str, Any]:
        """Charge what the answer spent, count it, log it; the response's ``ctxleak`` field."""
        rid, docs = held.rid, held.docs
        bounded = request.eps is not None
        if bounded:
            assert answer.eps_spent is not None
            await run_in_threadpool(self.ledger.settle, rid, answer.eps_spent)
            self.metrics.eps.inc(answer.eps_spent * len(docs))
        else:
            ex_post = answer.eps_ex_post_total
            if held.charged:  # (the server sampled at λ = 1: no ex-post figure, nothing charged)
                await run_in_threadpool(self.ledger.settle, rid, ex_post or 0.0)
            if docs and ex_post is not None:
                await run_in_threadpool(self.ledger.record_ex_post, [d.id for d in docs],
                                        ex_post)
                self.metrics.eps_ex_post.inc(ex_post * len(docs))
        mode = "bounded" if bounded else "lambda"
        self.metrics.tokens.labels(mode).inc(len(answer.ledger.entries))
        kept = {d.id for d in docs}
        info = ledger_fields(request, answer, [i for i in held.ids if i in kept], held.dropped)
        log.info(json.dumps({"event": "cid", "id": rid, "mode": mode, "documents": info[
            "documents"], "dropped": held.dropped, "tokens": info["tokens"],
            "epsilon_spent": info["epsilon_spent"], "epsilon_ex_post": info["epsilon_ex_post"]}))
        return info


def ledger_fields(request: CIDRequest, answer: Answer, kept: list[str],
                  dropped: list[str]) -> dict[str, Any]:
    """The ``ctxleak`` field of the response: how to read it is in docs/deploy-cid.md."""
    ledger = answer.ledger
    return {
        "mode": "bounded" if request.eps is not None else "lambda",
        "lambda": request.lam, "epsilon": request.eps,
        "temperature": request.temperature, "seed": answer.seed,
        "epsilon_spent": answer.eps_spent,
        "epsilon_ex_post": answer.eps_ex_post_total,
        "influence": float(sum(e.influence for e in ledger.entries)),
        "guarantee": GUARANTEE if request.eps is not None else NO_GUARANTEE,
        "lambdas": ledger.lambdas,
        "token_ids": [e.token_id for e in ledger.entries],
        "tokens": len(ledger.entries), "stopped_on_eos": ledger.stopped_on_eos,
        "documents": kept, "dropped": dropped,
        "context_tokens_cut": answer.context_tokens_cut,
    }
