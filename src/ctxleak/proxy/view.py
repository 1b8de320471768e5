"""What of an answer leaves the privacy proxy towards its client: one function,
:func:`client_view`, read by the response body, its headers and every streamed chunk, so that
they cannot drift. The operator's log line and the ledger keep everything.

A differential-privacy claim bounds what the released output says about one document;
anything released beside it is outside the claim. So an answer whose charge is a DP
guarantee (a mechanism's claim, bounded Context Influence Decoding) carries only its
tokens, its claim and the caller's own figures: never a datastore id (``documents_used``,
``charged``, ``budgets``), the datastore's size, a per-document charge or reservation, a
per-step figure computed from the documents (CID's ``lambdas``, ``influence``,
``epsilon_ex_post``) or the seed its noise came from. Where the client sent the documents
itself, what it already knows is echoed: its own ids, and which of them its budget left out.
An answer without a guarantee (plain CID, scrubbing) keeps every field. (The refusals over a
datastore say no id or size either: :mod:`~ctxleak.proxy.request`,
:func:`~ctxleak.proxy.answering.refusal`.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxleak.proxy.chat_request import ChatRequest

#: The claim: the mechanism and its settings, (ε, δ), the relation, the guarantee in words, what
#: this answer spent as its claim says, and whether the client chose the seed (an audit).
CLAIM_FIELDS = ("mode", "mechanism", "lambda", "epsilon", "delta", "relation", "guarantee",
                "epsilon_spent", "delta_spent", "seed_known")
#: The caller's own figures: its tokens and temperature.
OWN_FIELDS = ("token_ids", "tokens", "stopped_on_eos", "temperature")
#: What a client that sent its own documents already knows (never over a datastore).
ECHOED_FIELDS = ("documents", "dropped", "context_tokens_cut")

AUDIT = ("AUDIT: the client chose the seed, so this answer's noise is known to it and its DP "
         "guarantee is void; ")


def guaranteed(request: ChatRequest) -> bool:
    """Whether ``request``'s answer is charged a DP guarantee (a claim's ε or bounded CID's ε
    per token): its client sees only :func:`client_view`'s fields."""
    return request.charge.guaranteed


def client_view(info: Mapping[str, Any], request: ChatRequest) -> dict[str, Any]:
    """The response's ``ctxleak`` field as its client may read it (the module docstring's rule):
    an answer without a guarantee: ``info`` as it is; with one: the claim, the caller's own
    figures, the warnings that name no datastore document, and, where the client sent its own
    documents, its ids kept and dropped (and the seed it chose, under an audit)."""
    if not guaranteed(request):
        return dict(info)
    names = CLAIM_FIELDS + OWN_FIELDS + (() if request.datastore is not None
                                         else ECHOED_FIELDS)
    out = {k: info[k] for k in names if k in info}
    if info.get("seed_known"):
        out["seed"] = info.get("seed")
    out["warnings"] = list(own_warnings(info.get("warnings") or (), request))
    return out


def own_warnings(warnings: Iterable[str], request: ChatRequest) -> list[str]:
    """The warnings a client may read: all of them where it sent its own documents; over a
    datastore (under a guarantee), those that name no document of it."""
    warnings = list(warnings)
    if not warnings or request.datastore is None or not guaranteed(request):
        return warnings
    ids = [repr(i) for i, _ in request.datastore.documents]
    return [w for w in warnings if not any(i in w for i in ids)]


__all__ = ["AUDIT", "client_view", "guaranteed", "own_warnings"]
