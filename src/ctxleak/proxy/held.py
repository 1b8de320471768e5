"""What one answer of the privacy proxy holds of the budgets (:class:`Held`, made by
:class:`~ctxleak.proxy.charging.Charging`'s reservation), and the words of its refusals and of
``ctxleak serve``'s start line about budgets (bounded Context Influence Decoding: "Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models", App. B, Thm B.1, basic
composition)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxleak.proxy.budget import Budgets, answers_allowed
from ctxleak.proxy.chat_request import ChatRequest, Document
from ctxleak.proxy.composition import Composition
from ctxleak.proxy.request import ProxyError


@dataclass(frozen=True)
class Held:
    """What one answer holds of the budgets: its request id ``rid``, the request's document ids
    (each once, in order), the documents it may decode with, the ids dropped for their budget,
    whether a reservation was charged (bounded CID, or ``charge_ex_post``), what each charged
    document holds, the public documents (never charged), each document's class where known,
    and the warnings the response carries; ``over_share``: the documents left out because
    this caller's share of their budget is spent."""

    rid: str
    ids: list[str]
    docs: list[Document]
    dropped: list[str]
    charged: bool
    held: Mapping[str, float] = field(default_factory=dict)
    public: tuple[str, ...] = ()
    classes: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    over_share: tuple[str, ...] = ()
    #: whether each document holds its own individual charge (:meth:`Charging._individual`)
    individual: bool = False
    #: under Rényi composition, what one released token holds in the ledger (bounded CID)
    renyi_token: float | None = None
    #: over a datastore, what each of ``common_docs`` documents holds in the ledger's common
    #: row (:mod:`~ctxleak.proxy.ledger_common`), ``held`` naming only those charged more,
    #: whose whole loss in this answer ``totals`` gives
    common: float = 0.0
    common_docs: int = 0
    totals: Mapping[str, float] = field(default_factory=dict)

    @property
    def most(self) -> float:
        """The most one document holds: what an answer whose spend is unknown is charged."""
        return max(self.held.values(), default=0.0)


def caller_share_spent(share: float) -> ProxyError:
    """HTTP 429 ``caller_share_spent`` on ``ctxleak.documents``: this caller has spent its
    ``share`` of a document's budget (other callers may still use it)."""
    return ProxyError(429, f"ctxleak.documents: this caller has spent its share ({share:g}) of "
                           f"the privacy budget of the documents it needs; other callers are "
                           f"not affected", param="ctxleak.documents",
                      kind="insufficient_quota", code="caller_share_spent")


def flag_public(docs: Sequence[Document], public: Sequence[str]) -> list[Document]:
    """``docs`` with those whose id is in ``public`` marked :attr:`Document.public` (they go in
    the prompt, not to the mechanism; :mod:`ctxleak.proxy.public`)."""
    ids = set(public)
    return [replace(d, public=True) if d.id in ids and not d.public else d for d in docs]


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


def claim_never_fits(doc_id: str, budget: float, need: float, request: ChatRequest,
                     composition: Composition) -> str:
    """Why an answer reserving ``need`` (its claim's ε per answer, or under Rényi composition
    a divergence) can never use a document of budget ``budget``, and what would fit."""
    head = f"the reservation of {request.mechanism.key()} at max_tokens {request.max_tokens}"
    if composition.renyi:
        return (f"{head}, a Rényi divergence of {need:.4g} at order {composition.order:g}, is "
                f"more than document {doc_id!r}'s whole budget ({composition.epsilon(budget):g}"
                f" ε at δ = {composition.delta:g}, {budget:.4g} at that order), so this request "
                f"could never use it: ask for fewer tokens or a smaller ε, or raise the budget")
    return (f"{head}, its claim ε = {need:g} per answer, is more than document {doc_id!r}'s "
            f"whole budget of {budget:g}, so this request could never use it: raise the budget "
            f"or deploy a mechanism with a smaller ε")


def share_warnings(over_share: Sequence[str]) -> tuple[str, ...]:
    """The response's warning for the documents left out for this caller's share (none where
    no document was)."""
    if not over_share:
        return ()
    return (f"{len(over_share)} document(s) left out: this caller's share of their budget is "
            f"spent",)


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


__all__ = ["Held", "budget_spent", "caller_share_spent", "claim_never_fits", "flag_public",
           "never_fits", "share_warnings", "sizing_text"]
