"""One answer of the privacy proxy, whatever defence gives it: a
:class:`~ctxleak.mitigations.mechanisms.Mechanism` (Context Influence Decoding and its bounded
form, "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def.
3.4 and App. B; a DP vote over shards; DP-RAG; scrubbing) asked as every part of ctxleak asks
it: one :class:`~ctxleak.mitigations.mechanisms.AnswerRequest` per chat request, whose
``prompt(texts)`` is ``ctxleak influence``'s qa template holding those document texts in order
(the prompt with every document cut to the model's window minus ``max_tokens``), or the app's
chat messages where the operator gave them, and ``mechanism.answer_group(lm, asked,
listener)``: CID streams its tokens as they are drawn, the others announce the whole answer."""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Asked,
    Decoding,
    Listener,
    Mechanism,
    MechanismAnswer,
    claim_of,
)
from ctxleak.mitigations.prompts import (
    PromptOf,
    PromptParts,
    app_chat_prompt,
    document_parts,
    template_prompt,
)
from ctxleak.proxy.budget import answers_allowed
from ctxleak.proxy.chat_request import ChatRequest, Document
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.public import public_hits, store_of, with_public
from ctxleak.proxy.request import ProxyError

#: Where a mechanism's refusal of a request points (its :class:`ConfigError`'s parameter ->
#: the request field); any other parameter is the mechanism's own (``ctxleak.mechanism``).
FIELDS = {"greedy": "temperature", "documents": "ctxleak.documents",
          "shards": "ctxleak.documents", "scores": "ctxleak.documents"}


@dataclass(frozen=True)
class Prepared:
    """A request ready for its mechanism: the mechanism, its :class:`AnswerRequest`, its
    decoding settings, the prompt's length with every document and the context tokens the
    model's window cut."""

    mechanism: Mechanism
    request: AnswerRequest
    decoding: Decoding
    prompt_tokens: int
    cut: int

    @property
    def asked(self) -> Asked:
        return Asked(self.mechanism, self.request, self.decoding)

    @property
    def group(self) -> Hashable:
        """The requests one ``answer_group`` call may take together (the mechanism's
        ``batch_key``)."""
        return self.mechanism.batch_key(self.decoding)


@dataclass(frozen=True)
class Reply:
    """An answer as the proxy releases it: the request it answers, prepared; the mechanism's
    answer, its text, and what the answer reports of itself (its mechanism's ``figures``)."""

    prepared: Prepared
    answer: MechanismAnswer
    text: str
    figures: dict[str, Any]

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason``: ``stop`` on the model's EOS, else ``length``."""
        return "stop" if self.answer.stopped_on_eos else "length"

    @property
    def tokens(self) -> int:
        """The released tokens, the stopping EOS included (as CID's ledger counts them)."""
        return self.answer.released

    @property
    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage``: the prompt with every document and the answer's tokens (the
        stopping EOS left out)."""
        n_out, n_in = len(self.answer.response_ids), self.prepared.prompt_tokens
        return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}


def answer_parts(lm: LanguageModel, documents: Sequence[Document], query: str,
                 max_tokens: int) -> tuple[PromptParts, int]:
    """The prompt with and without the documents: the qa template of ``ctxleak influence``
    (``Document: {context}. {query}``, in the model's chat template where it has one), the
    documents as passages in their order, the context cut to the window minus ``max_tokens``."""
    return document_parts(lm, [d.text for d in documents], query, reserve=max_tokens)


def _prompt_of(lm: LanguageModel, request: ChatRequest, parts: PromptParts | None = None,
               held: tuple[str, ...] = (), public: tuple[str, ...] = ()) -> PromptOf:
    """The app's chat messages with the user's question in them, else the template's prompt as
    a function of the document texts (:func:`template_prompt`), the ``public`` texts first
    (:func:`~ctxleak.proxy.public.with_public`); the public and the request's own documents
    ``held`` together, or none, already tokenised in ``parts`` where given."""
    if request.messages is not None:
        return with_public(app_chat_prompt(lm, request.messages, request.question), public)
    other = template_prompt(lm, request.query, reserve=request.max_tokens)
    if parts is None:
        return with_public(other, public)
    whole = public + held

    def prompt(texts: Sequence[str]) -> list[int]:
        texts = public + tuple(texts)
        if not texts:
            return list(parts.empty)
        return list(parts.full) if texts == whole else other(texts)

    return prompt


def prepare(lm: LanguageModel, request: ChatRequest, documents: Sequence[Document]) -> Prepared:
    """``request`` with ``documents`` (those the budget let through) as its mechanism's
    :class:`AnswerRequest`: the private texts and ids in order, ``prompt(texts)`` the proxy's
    prompt holding the public documents (:attr:`Document.public`) then those texts
    (``prompt([])``: without retrieval, the public documents still in it), the request's seed
    (a fresh one where it gives none) and the user's last message as the query. Over a
    datastore, its best ``public_top_k`` public documents for the question are in the prompt
    and the mechanism's datastore holds the private ones (:mod:`ctxleak.proxy.public`)."""
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    private = [d for d in documents if not d.public]
    if request.datastore is not None:  # the mechanism retrieves for itself
        # (a spent document is not retrieved: the datastore holds those let through)
        public = public_hits(tuple((d.id, d.text) for d in documents if d.public),
                             request.question, request.public_top_k)
        prompt = _prompt_of(lm, request, public=public)
        store = store_of(tuple((d.id, d.text) for d in private))
        asked = AnswerRequest(documents=(), prompt=prompt, seed=seed, query=request.question,
                              datastore=store)
        return Prepared(request.mechanism, asked, request.decoding, len(prompt([])), 0)
    shown = [d for d in documents if d.public]
    need = request.mechanism.documents_needed()
    if shown and len(private) < need:  # refused as too few documents are (FIELDS)
        raise ConfigError(f"documents: {request.mechanism.key()} needs at least {need} private "
                          f"documents, the request has {len(private)} ({len(shown)} public "
                          f"ones are in the prompt, not given to the mechanism)",
                          param="documents")
    parts, cut = answer_parts(lm, shown + private, request.query, request.max_tokens)
    texts = tuple(d.text for d in private)
    prompt = _prompt_of(lm, request, parts, texts, tuple(d.text for d in shown))
    asked = AnswerRequest(documents=texts, prompt=prompt, seed=seed,
                          ids=tuple(d.id for d in private), query=request.question)
    return Prepared(request.mechanism, asked, request.decoding, len(parts.full), cut)


def reply_of(lm: LanguageModel, prepared: Prepared, answer: MechanismAnswer) -> Reply:
    """The :class:`Reply` of a prepared request's ``answer``."""
    return Reply(prepared, answer, lm.decode(list(answer.response_ids)),
                 prepared.mechanism.figures(answer, prepared.request, prepared.decoding))


def answer_alone(lm: LanguageModel, request: ChatRequest, documents: Sequence[Document],
                 listener: Listener | None = None) -> Reply:
    """``request`` answered by its mechanism on its own (a served model, whose server takes
    several requests at once), ``listener`` hearing its tokens as they are decided."""
    prepared = prepare(lm, request, documents)
    [answer] = prepared.mechanism.answer_group(lm, [prepared.asked], listener)
    return reply_of(lm, prepared, answer)


def scored(reply: Reply) -> Reply:
    """A released answer whose figures came after its release (``answer.later``: a served
    model's own sample, scored with and without the documents), with them."""
    assert reply.answer.later is not None
    answer, prepared = reply.answer.later(), reply.prepared
    return replace(reply, answer=answer, figures=prepared.mechanism.figures(
        answer, prepared.request, prepared.decoding))


def refusal(exc: ConfigError, request: ChatRequest) -> ProxyError:
    """A mechanism's refusal of a request (greedy decoding for a mechanism that samples, too
    few documents for its shards) as HTTP 400 naming the request field."""
    param = FIELDS.get(str(getattr(exc, "param", "") or ""), "ctxleak.mechanism")
    why = f": {exc}" if request.datastore is None else \
        " over this proxy's datastore (the operator's log says why)"  # its words may size it
    return ProxyError(400, f"{param}: {request.mechanism.key()} cannot answer this "
                           f"request{why}", param=param)


def mechanism_text(config: ProxyConfig) -> str:
    """The proxy's default mechanism in words, for ``ctxleak serve``'s start line: what it
    claims for an answer of ``max_tokens`` tokens, what it reserves and how many answers the
    default budget allows."""
    mechanism, decoding = config.mechanism, config.decoding()
    charge = mechanism.charge(decoding)
    head = f"requests that name no mechanism are answered by {mechanism.key()}"
    if charge.per_answer is None and (charge.per_token is not None or charge.ex_post):
        return (f"requests that name no mechanism are answered by "
                f"{mechanism.describe()}, as ctxleak.lambda / ctxleak.epsilon ask")
    claim = claim_of(mechanism, decoding)
    if claim.eps is None:
        return f"{head}: {claim.covers()}; nothing is charged"
    allowed = ""
    if config.budgets.default is not None and claim.eps > 0:
        allowed = (f"; a budget of {config.budgets.default:g} allows "
                   f"{answers_allowed(config.budgets.default, claim.eps, 0)} such answers")
    whose = "it carries"
    if config.datastore is not None:
        private = sum(not config.budgets.public(i, config.classes.get(i))
                      for i, _ in config.datastore.documents)
        public = len(config.datastore) - private
        whose = (f"of the datastore ({len(config.datastore)} documents, which it retrieves "
                 f"from itself" + (f"; {private} private: its {public} public ones are "
                                   f"retrieved into every prompt, {config.public_top_k} per "
                                   f"question, and never charged)" if public else ")"))
    return (f"{head}: each answer of up to {config.max_tokens} tokens reserves and is charged "
            f"ε = {claim.eps:.4g} (δ = {claim.delta:.2g}, relation {claim.relation}) of every "
            f"private document {whose}{allowed}")


__all__ = ["Prepared", "Reply", "answer_alone", "answer_parts", "mechanism_text", "prepare",
           "refusal", "reply_of", "scored"]
