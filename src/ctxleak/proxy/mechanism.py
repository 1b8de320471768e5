"""One answer of the privacy proxy by a defence other than Context Influence Decoding: a
:class:`~ctxleak.mitigations.mechanisms.Mechanism` (a DP vote over shards, DP-RAG, scrubbing;
``ctxleak serve --mechanism``, a request's ``ctxleak.mechanism``) asked as every part of ctxleak
asks it: one :class:`~ctxleak.mitigations.mechanisms.AnswerRequest` per chat request, whose
``prompt(texts)`` is the prompt CID's answers use (:func:`~ctxleak.proxy.decode.answer_parts`:
``ctxleak influence``'s qa template holding those document texts in order, cut to the model's
window minus ``max_tokens``), and ``mechanism.answer(lm, requests, decoding)``.

A mechanism decodes the whole answer before anything is released: a streamed request gets the
finished answer in chunks (:func:`ctxleak.proxy.streaming.answer_and_settle`)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.mechanisms import (
    RELATIONS,
    AnswerRequest,
    Decoding,
    Mechanism,
    MechanismAnswer,
)
from ctxleak.mitigations.prompts import app_chat_prompt, template_prompt
from ctxleak.proxy.budget import answers_allowed
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import answer_parts
from ctxleak.proxy.request import Document, MechanismRequest, ProxyError, cid_settings

#: Where a mechanism's refusal of a request points (its :class:`ConfigError`'s parameter ->
#: the request field); any other parameter is the mechanism's own (``ctxleak.mechanism``).
FIELDS = {"greedy": "temperature", "documents": "ctxleak.documents",
          "shards": "ctxleak.documents", "scores": "ctxleak.documents"}


@dataclass(frozen=True)
class Prepared:
    """A request ready for its mechanism: its :class:`AnswerRequest`, the mechanism, its
    decoding settings, the prompt's length with every document and the context tokens the
    model's window cut."""

    mechanism: Mechanism
    request: AnswerRequest
    decoding: Decoding
    prompt_tokens: int
    cut: int

    @property
    def group(self) -> tuple[str, Decoding]:
        """The requests one ``answer`` call may take together: the same mechanism (its key)
        and the same decoding settings."""
        return self.mechanism.key(), self.decoding


@dataclass(frozen=True)
class Reply:
    """A mechanism's decoded answer as the proxy releases it: the mechanism's answer, its
    text, the prompt's length, the context tokens cut and the seed."""

    answer: MechanismAnswer
    text: str
    prompt_tokens: int
    context_tokens_cut: int
    seed: int

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason``: ``stop`` on the model's EOS, else ``length``."""
        return "stop" if self.answer.stopped_on_eos else "length"

    @property
    def tokens(self) -> int:
        """The released tokens, the stopping EOS included (as CID's ledger counts them)."""
        return len(self.answer.response_ids) + int(self.answer.stopped_on_eos)

    @property
    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage``: the prompt with every document and the answer's tokens (the
        stopping EOS left out)."""
        n_out = len(self.answer.response_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n_out,
                "total_tokens": self.prompt_tokens + n_out}


def prepare(lm: LanguageModel, request: MechanismRequest,
            documents: Sequence[Document]) -> Prepared:
    """``request`` with ``documents`` (those the budget let through) as its mechanism's
    :class:`AnswerRequest`: the texts and ids in order, ``prompt(texts)`` the proxy's prompt
    holding those texts (``prompt([])``: without retrieval), the request's seed (a fresh one
    where it gives none) and the user's last message as the query."""
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    if request.messages is not None:  # the app's chat messages, the user's question in them
        prompt = app_chat_prompt(lm, request.messages, request.question)
    else:
        prompt = template_prompt(lm, request.query, reserve=request.max_tokens)
    if request.datastore is not None:  # the mechanism retrieves for itself
        kept = {d.id for d in documents}
        store: Datastore | None = request.datastore
        if len(kept) < len(request.datastore):  # a document whose budget is spent is not retrieved
            store = Datastore(tuple((i, t) for i, t in request.datastore.documents
                                    if i in kept)) \
                if kept else None
        asked = AnswerRequest(documents=(), prompt=prompt, seed=seed, query=request.question,
                              datastore=store)
        return Prepared(request.mechanism, asked, request.decoding, len(prompt([])), 0)
    parts, cut = answer_parts(lm, documents, request.query, request.max_tokens)
    asked = AnswerRequest(documents=tuple(d.text for d in documents), prompt=prompt,
                          seed=seed, ids=tuple(d.id for d in documents),
                          query=request.question)
    return Prepared(request.mechanism, asked, request.decoding, len(parts.full), cut)


def reply_of(lm: LanguageModel, prepared: Prepared, answer: MechanismAnswer) -> Reply:
    """The :class:`Reply` of a prepared request's decoded ``answer``."""
    return Reply(answer=answer, text=lm.decode(list(answer.response_ids)),
                 prompt_tokens=prepared.prompt_tokens, context_tokens_cut=prepared.cut,
                 seed=prepared.request.seed)


def answer_alone(lm: LanguageModel, request: MechanismRequest,
                 documents: Sequence[Document]) -> Reply:
    """``request`` answered by its mechanism on its own (a served model, whose server takes
    several requests at once)."""
    prepared = prepare(lm, request, documents)
    [answer] = prepared.mechanism.answer(lm, [prepared.request], prepared.decoding)
    return reply_of(lm, prepared, answer)


def refusal(exc: ConfigError, request: MechanismRequest) -> ProxyError:
    """A mechanism's refusal of a request (greedy decoding for a mechanism that samples, too
    few documents for its shards) as HTTP 400 naming the request field."""
    param = FIELDS.get(str(getattr(exc, "param", "") or ""), "ctxleak.mechanism")
    return ProxyError(400, f"{param}: {request.mechanism.key()} cannot answer this request: "
                           f"{exc}", param=param)




def mechanism_text(config: ProxyConfig) -> str:
    """The proxy's default mechanism in words, for ``ctxleak serve``'s start line: what it
    claims for an answer of ``max_tokens`` tokens, what it reserves and how many answers the
    default budget allows."""
    mechanism = config.mechanism
    settings = cid_settings(mechanism)
    if settings is not None:
        lam, eps = settings
        how = f"λ = {lam:g}" if eps is None else f"ε = {eps:g} per token (λ ≤ {lam:g})"
        return (f"requests that name no mechanism are answered by CID at {how}, as "
                f"ctxleak.lambda / ctxleak.epsilon ask")
    claim = mechanism.claim(Decoding(temperature=config.temperature,
                                     max_new_tokens=config.max_tokens,
                                     min_new_tokens=config.min_tokens))
    head = f"requests that name no mechanism are answered by {mechanism.key()}"
    if claim.eps is None:
        return f"{head}: {claim.covers()}; nothing is charged"
    allowed = ""
    if config.budgets.default is not None and claim.eps > 0:
        allowed = (f"; a budget of {config.budgets.default:g} allows "
                   f"{answers_allowed(config.budgets.default, claim.eps, 0)} such answers")
    whose = "it carries" if config.datastore is None else \
        f"of the datastore ({len(config.datastore)} documents, which it retrieves from itself)"
    return (f"{head}: each answer of up to {config.max_tokens} tokens reserves and is charged "
            f"ε = {claim.eps:.4g} (δ = {claim.delta:.2g}, relation {claim.relation}) of every "
            f"private document {whose}{allowed}")


def mechanism_fields(request: MechanismRequest, reply: Reply, kept: list[str],
                     dropped: list[str], docs: Sequence[Document], *,
                     charged: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``ctxleak`` field of a mechanism's answer (docs/deploy-cid.md, "Deploying another
    defence"): the mechanism, its claim (``epsilon``, ``delta``, ``relation``: the most an
    answer may spend, reserved), what the ledger charged each document (``charged``;
    ``epsilon_spent`` that charge, 0 where no document was charged, null for a mechanism
    without a guarantee) and the δ of the answer's claim (``delta_spent``)."""
    answer, claim = reply.answer, request.claim
    spent: float | None = answer.claim.eps
    if charged is not None:
        spent = max(charged.values(), default=0.0)
    used = list(answer.datastore_used) if request.datastore is not None else \
        [docs[i].id for i in answer.documents_used if 0 <= i < len(docs)]
    return {
        "mode": "mechanism", "mechanism": request.mechanism.key(),
        "relation": answer.claim.relation, "epsilon": claim.eps, "delta": claim.delta,
        "temperature": request.temperature, "seed": reply.seed,
        "epsilon_spent": spent,
        "delta_spent": answer.claim.delta if answer.claim.eps is not None else None,
        "epsilon_ex_post": None,
        "charged": dict(charged or {}),
        "guarantee": mechanism_guarantee(request, answer.claim.covers()),
        "token_ids": list(answer.response_ids),
        "tokens": reply.tokens, "tokens_paid": answer.tokens_paid,
        "stopped_on_eos": answer.stopped_on_eos,
        "documents": kept, "documents_used": list(dict.fromkeys(used)), "dropped": dropped,
        "context_tokens_cut": reply.context_tokens_cut,
    }


def mechanism_guarantee(request: MechanismRequest, covers: str) -> str:
    """What a mechanism's answer guarantees, in words: its claim, and what was charged."""
    key = request.mechanism.key()
    if covers == RELATIONS["none"]:
        return f"{key}: {covers}; nothing is charged to the budgets"
    return (f"{key}: {covers}; each private document in documents is charged epsilon_spent, "
            f"the ε of this answer's claim")


__all__ = ["Prepared", "Reply", "answer_alone", "mechanism_fields", "mechanism_guarantee",
           "mechanism_text", "prepare", "refusal", "reply_of"]
