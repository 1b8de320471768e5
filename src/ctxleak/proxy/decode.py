"""One answer of the privacy proxy by Context Influence Decoding: the request's documents and
prompt built into the two prompts of CID the way ``ctxleak influence`` builds them, and answered
as every defence is, by its mechanism (:class:`~ctxleak.mitigations.cid.CID`'s ``answer``;
Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models, Def. 3.4,
Eq. 6; bounded: App. B, Alg. 1)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ctxleak.engine.capabilities import WEIGHTS, capabilities_of
from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.prompts import PromptParts, document_parts
from ctxleak.mitigations.sampled import eos_masked, own_answers
from ctxleak.proxy.request import CIDRequest, Document

#: Plain CID decodes as bounded CID with this ε per token, which no step's divergence reaches,
#: so λ_t = λ at every step (the same mixture and the same tokens as plain CID) and each step's
#: ex-post ε (2·max_y |log p̄_λ(y|D) − log p(y|∅)|) is computed on the way. Not a guarantee.
EX_POST_ONLY = 1e300


@dataclass(frozen=True)
class Answer:
    """A decoded answer: its ledger (one entry per released token, the stopping EOS included;
    ``bounded_eps`` None for plain CID), each token's ex-post ε (None where the server sampled
    the answer itself), the text, the prompt lengths and how many context tokens the model's
    window forced out."""

    ledger: RowLedger
    eps_ex_post: tuple[float, ...] | None
    text: str
    prompt_tokens: int
    context_tokens_cut: int
    seed: int

    @property
    def eps_spent(self) -> float | None:
        """The guaranteed ε of the answer per document (basic composition, Thm B.1): ε per
        released token, the stopping EOS included; None for plain CID."""
        return self.ledger.composed_eps

    @property
    def eps_ex_post_total(self) -> float | None:
        return None if self.eps_ex_post is None else float(sum(self.eps_ex_post))

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason``: ``stop`` on the model's EOS, else ``length``."""
        return "stop" if self.ledger.stopped_on_eos else "length"

    @property
    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage`` field: the prompt with the context and the answer's tokens
        (the stopping EOS left out)."""
        n_out = len(self.ledger.response_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n_out,
                "total_tokens": self.prompt_tokens + n_out}


def answer_parts(lm: LanguageModel, documents: Sequence[Document], query: str,
                 max_tokens: int) -> tuple[PromptParts, int]:
    """The prompt with and without the documents: the qa template of ``ctxleak influence``
    (``Document: {context}. {query}``, in the model's chat template where it has one), the
    documents as passages in their order, the context cut to the window minus ``max_tokens``."""
    return document_parts(lm, [d.text for d in documents], query, reserve=max_tokens)


def server_samples(lm: LanguageModel, request: CIDRequest) -> bool:
    """Whether the model's server samples the answer itself: λ = 1 and T = 1 without ε is
    plain decoding, which a served model (no weights here) samples on its server, as
    ``ctxleak influence`` has it do at that setting."""
    return request.lam == 1.0 and request.eps is None and request.temperature == 1.0 \
        and WEIGHTS not in capabilities_of(lm)


@dataclass(frozen=True)
class Prepared:
    """An answer ready to be decoded by CID: its two prompts, the context tokens cut, its
    seed, its decoding settings, whether it samples (``False``: greedy CID) and the texts of its
    documents; asked as its :attr:`mechanism`'s :attr:`request` under :attr:`decoding`."""

    parts: PromptParts
    cut: int
    seed: int
    config: CIDConfig
    sample: bool
    plain: bool  # plain CID (no ε): the ledger keeps no guarantee
    documents: tuple[str, ...] = ()

    @property
    def mechanism(self) -> CID:
        """CID at the request's λ and ε per token (plain CID: :data:`EX_POST_ONLY`)."""
        return self.config.as_mechanism()[0]

    @property
    def decoding(self) -> Decoding:
        """The request's temperature, lengths and greedy choice."""
        return self.config.as_mechanism(greedy=not self.sample)[1]

    @property
    def request(self) -> AnswerRequest:
        """Its :class:`AnswerRequest`: the prompt holds its documents or none, tokenised once
        (:attr:`parts`)."""
        return AnswerRequest(documents=self.documents,
                             prompt=self.parts.prompt_of(self.documents), seed=self.seed)


def prepare_answer(lm: LanguageModel, request: CIDRequest,
                   documents: Sequence[Document]) -> Prepared:
    """``request`` with ``documents`` as its context made ready to be decoded by CID: the
    prompts, a fresh seed where it gives none, and its settings (plain CID as bounded CID at
    :data:`EX_POST_ONLY`, so each step's ex-post ε is computed on the way)."""
    parts, cut = answer_parts(lm, documents, request.query, request.max_tokens)
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    config = CIDConfig(lam=request.lam, temperature=request.temperature or 1.0,
                       max_new_tokens=request.max_tokens, min_new_tokens=request.min_tokens,
                       bounded_eps=request.eps if request.eps is not None else EX_POST_ONLY)
    return Prepared(parts=parts, cut=cut, seed=seed, config=config,
                    sample=request.temperature is not None, plain=request.eps is None,
                    documents=tuple(d.text for d in documents))


def finish_answer(lm: LanguageModel, prepared: Prepared, ledger: RowLedger) -> Answer:
    """The :class:`Answer` of a prepared answer's decoded ``ledger`` (plain CID: its entries
    keep their ex-post ε and lose the ε of :data:`EX_POST_ONLY`)."""
    ex_post = tuple(float(e.eps_ex_post) for e in ledger.entries if e.eps_ex_post is not None)
    if prepared.plain:  # plain CID: no ε guarantee in the ledger
        ledger = replace(ledger, row=0, bounded_eps=None,
                         entries=tuple(replace(e, eps=None) for e in ledger.entries))
    else:
        ledger = replace(ledger, row=0)
    return Answer(ledger=ledger, eps_ex_post=ex_post, text=lm.decode(ledger.response_ids),
                  prompt_tokens=len(prepared.parts.full), context_tokens_cut=prepared.cut,
                  seed=prepared.seed)


def decode_answer(lm: LanguageModel, request: CIDRequest, documents: Sequence[Document],
                  on_entry: Callable[[LedgerEntry], None] | None = None) -> Answer:
    """Decode ``request`` with ``documents`` as its context (those the budget let through).

    At λ = 1 and T = 1 without ε, CID is plain decoding: a served model's server samples the
    answer itself (:func:`server_samples`), which is scored with and without the context; every
    other setting mixes the two distributions at each step. ``on_entry``: called with each
    released token's ledger entry (the stopping EOS too) as it is drawn; the server-sampled
    answer's all at once, when it has been scored."""
    if server_samples(lm, request):
        answer = release_sampled(lm, request, documents).scored()
        if on_entry is not None:
            for entry in answer.ledger.entries:
                on_entry(entry)
        return answer
    prepared = prepare_answer(lm, request, documents)
    heard = None if on_entry is None else (lambda _row, entry: on_entry(entry))
    [decoded] = prepared.mechanism.answer(lm, [prepared.request], prepared.decoding,
                                          on_entry=heard)
    assert decoded.ledger is not None  # CID's answers carry their ledger
    return finish_answer(lm, prepared, decoded.ledger)


@dataclass(frozen=True)
class Sampled:
    """An answer the model's server sampled (λ = 1, T = 1), before it is scored: ``answer``
    holds its tokens and text, every ledger entry's log-probs and influence NaN (not computed
    yet); :meth:`scored` scores it with and without the context (Def. 3.1 with n = |D|)."""

    lm: LanguageModel
    parts: PromptParts
    request: CIDRequest
    answer: Answer

    def scored(self) -> Answer:
        """The answer with each released token (the stopping EOS too) scored teacher-forced
        with and without the context, EOS masked before ``min_tokens`` as when it was drawn."""
        ledger = self.answer.ledger
        released = [e.token_id for e in ledger.entries]
        lc, le = eos_masked(self.lm, [self.parts.full, self.parts.empty],
                            [released, released], self.request.min_tokens) \
            if released else [np.zeros(0), np.zeros(0)]
        return replace(self.answer, ledger=RowLedger.from_scores(
            0, released, lc, le, lam=1.0, temperature=1.0, stopped_on_eos=ledger.stopped_on_eos))


def release_sampled(lm: LanguageModel, request: CIDRequest, documents: Sequence[Document],
                    on_entry: Callable[[LedgerEntry], None] | None = None) -> Sampled:
    """Plain decoding (λ = 1, T = 1) of a served model: the answer its server samples, ready
    to be released before it is scored (:class:`Sampled`); ``on_entry`` hears each released
    token's entry (log-probs NaN) as soon as the server answered. Its released tokens are the
    answer's, the stopping EOS as the model's first EOS id."""
    parts, cut = answer_parts(lm, documents, request.query, request.max_tokens)
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    [(ids, stopped)] = own_answers(lm, [parts], [seed], 1.0, request.max_tokens,
                                   request.min_tokens)
    released = list(ids) + ([lm.eos_ids[0]] if stopped and lm.eos_ids else [])
    nan = [float("nan")] * len(released)
    ledger = RowLedger.from_scores(0, released, nan, nan, lam=1.0, temperature=1.0,
                                   stopped_on_eos=stopped)
    if on_entry is not None:
        for entry in ledger.entries:
            on_entry(entry)
    answer = Answer(ledger=ledger, eps_ex_post=None, text=lm.decode(ids),
                    prompt_tokens=len(parts.full), context_tokens_cut=cut, seed=seed)
    return Sampled(lm=lm, parts=parts, request=request, answer=answer)
