"""One answer of the privacy proxy: the request's documents and prompt built into the two prompts
of Context Influence Decoding the way ``ctxleak influence`` builds them, decoded by
:func:`~ctxleak.methods.influence.cid.generate_cid` (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4, Eq. 6; bounded: App. B, Alg. 1)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.influence.cid import CIDConfig, generate_cid
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.methods.influence.ledger import RowLedger
from ctxleak.methods.influence.ngrams import PromptParts
from ctxleak.methods.influence.passages import list_pieces
from ctxleak.proxy.request import CIDRequest, Document

#: Plain CID decodes as bounded CID with this ε per token, which no step's divergence reaches,
#: so λ_t = λ at every step (the same mixture and the same tokens as plain CID) and each step's
#: ex-post ε (2·max_y |log p̄_λ(y|D) − log p(y|∅)|) is computed on the way. Not a guarantee.
EX_POST_ONLY = 1e300


@dataclass(frozen=True)
class Answer:
    """A decoded answer: its ledger (one entry per released token, the stopping EOS included;
    ``bounded_eps`` None for plain CID), each token's ex-post ε, the text, the prompt lengths
    and how many context tokens the model's window forced out."""

    ledger: RowLedger
    eps_ex_post: tuple[float, ...]
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
    def eps_ex_post_total(self) -> float:
        return float(sum(self.eps_ex_post))


def answer_parts(lm: LanguageModel, documents: Sequence[Document], query: str,
                 max_tokens: int) -> tuple[PromptParts, int]:
    """The prompt with and without the documents: the qa template of ``ctxleak influence``
    (``Document: {context}. {query}``, in the model's chat template where it has one), the
    documents as passages in their order, the context cut to the window minus ``max_tokens``."""
    pieces = list_pieces([d.text for d in documents])
    example = InfluenceExample(id="request", context="".join(pieces), query=query,
                               reference=None, task="qa",
                               passages=tuple(pieces) if pieces else None)
    return prompt_parts(lm, example, reserve=max_tokens)


def decode_answer(lm: LanguageModel, request: CIDRequest, documents: Sequence[Document]
                  ) -> Answer:
    """Decode ``request`` with ``documents`` as its context (those the budget let through)."""
    parts, cut = answer_parts(lm, documents, request.query, request.max_tokens)
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    greedy = request.temperature is None
    config = CIDConfig(lam=request.lam, temperature=request.temperature or 1.0,
                       max_new_tokens=request.max_tokens, min_new_tokens=request.min_tokens,
                       bounded_eps=request.eps if request.eps is not None else EX_POST_ONLY)
    ledger = generate_cid(lm, parts.full, parts.empty, config, seed, sample=not greedy)
    ex_post = tuple(float(e.eps_ex_post) for e in ledger.entries if e.eps_ex_post is not None)
    if request.eps is None:  # plain CID: no ε guarantee in the ledger
        ledger = replace(ledger, bounded_eps=None,
                         entries=tuple(replace(e, eps=None) for e in ledger.entries))
    return Answer(ledger=ledger, eps_ex_post=ex_post, text=lm.decode(ledger.response_ids),
                  prompt_tokens=len(parts.full), context_tokens_cut=cut, seed=seed)
