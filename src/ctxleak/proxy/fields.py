"""The ``ctxleak`` field of a privacy-proxy answer as the proxy builds it (before
:func:`~ctxleak.proxy.view.client_view` keeps of it what the answer's claim covers), the
guarantee in words, and what the request log keeps of it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ctxleak.proxy.answering import Reply
from ctxleak.proxy.chat_request import ChatRequest
from ctxleak.proxy.held import Held
from ctxleak.proxy.view import AUDIT

GUARANTEE = ("bounded CID: each released token (the stopping EOS included) is ε-DP with respect "
             "to any one document of the context, so this answer spends epsilon_spent of each "
             "document in documents (basic composition)")
NO_GUARANTEE = ("plain CID (a fixed λ) has no DP guarantee: epsilon_ex_post is 2·max_y |log "
                "p̄_λ(y|D) − log p(y|∅)| summed over tokens, a figure about this context alone "
                "(null at λ = 1 and T = 1 through a served model, whose server samples the "
                "answer itself)")


#: The fields of a response's ``ctxleak`` field the request log keeps (never a text).
LOGGED = ("mode", "mechanism", "documents", "dropped", "documents_used", "tokens",
          "epsilon_spent", "epsilon_ex_post", "delta_spent", "seed", "seed_known")


def answer_fields(request: ChatRequest, reply: Reply, held: Held,
                  charged: Mapping[str, float] | None) -> dict[str, Any]:
    """The ``ctxleak`` field of the response (docs/deploy-cid.md says how to read it): what the
    answer reports of itself (its mechanism's ``figures``), the documents it used and dropped,
    what the ledger charged each (``charged``; None: nothing was reserved) and its
    ``epsilon_spent`` where the charge is a guarantee's (0 where no document was charged),
    the guarantee in words, the warnings."""
    kept = {d.id for d in held.docs}
    info = {**reply.figures, "temperature": request.temperature,
            "seed": reply.prepared.request.seed,
            "charged": dict(charged or {}), "guarantee": guarantee(request, reply),
            "documents": [i for i in held.ids if i in kept], "dropped": held.dropped,
            "context_tokens_cut": reply.prepared.cut, "warnings": list(held.warnings)}
    if held.common:  # what every private document of the datastore was charged alike
        info["charged_common"] = held.common
    if request.charge.guaranteed and charged is not None:
        info["epsilon_spent"] = max([*charged.values(), held.common], default=0.0)
    if request.charge.guaranteed:  # the client chose the seed only where the operator audits
        info["seed_known"] = request.seed_known
    return info


def logged(info: Mapping[str, Any], request: ChatRequest) -> dict[str, Any]:
    """What the request log keeps of an answer's ``ctxleak`` field (:data:`LOGGED`), in a size
    that does not grow with the datastore: over one, its documents as a count and a digest of
    their ids, the dropped as a count, and only the documents charged more than what every one
    was charged alike (``charged``, beside ``charged_common``)."""
    out = {k: info[k] for k in LOGGED if k in info}
    if request.datastore is None:
        return out
    ids = list(info.get("documents") or ())
    out["documents"] = {"count": len(ids), "sha256": hashlib.sha256(
        "\n".join(ids).encode("utf-8")).hexdigest()[:16]}
    out["dropped"] = len(info.get("dropped") or ())
    common = float(info.get("charged_common") or 0.0)
    out["charged"] = {d: v for d, v in (info.get("charged") or {}).items() if v > common}
    if common:
        out["charged_common"] = common
    return out


def guarantee(request: ChatRequest, reply: Reply) -> str:
    """What the answer guarantees, in words: bounded CID's per-token guarantee, plain CID's
    ex-post figure, or a mechanism's claim and what was charged; a guarantee whose seed the
    client chose (an audit, ``audit_seeds``) starts by saying it is void."""
    said = _guarantee(request, reply)
    return AUDIT + said if request.charge.guaranteed and request.seed_known else said


def _guarantee(request: ChatRequest, reply: Reply) -> str:
    charge = request.charge
    if charge.per_token is not None:
        return GUARANTEE
    if charge.per_answer is None and charge.ex_post:
        return NO_GUARANTEE
    key, covers = request.mechanism.key(), reply.answer.claim.covers()
    if reply.answer.claim.eps is None:
        return f"{key}: {covers}; nothing is charged to the budgets"
    if request.datastore is not None:  # each document charged its own loss (the filter)
        return (f"{key}: {covers}; each private document of the datastore is charged what "
                f"this answer can cost it, at most epsilon_spent (nothing where it could not "
                f"change the answer)")
    return (f"{key}: {covers}; each private document in documents is charged epsilon_spent, "
            f"the ε of this answer's claim")


__all__ = ["GUARANTEE", "LOGGED", "NO_GUARANTEE", "answer_fields", "guarantee", "logged"]
