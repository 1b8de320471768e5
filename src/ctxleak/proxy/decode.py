"""One answer of the privacy proxy: the request's documents and prompt built into the two prompts
of Context Influence Decoding the way ``ctxleak influence`` builds them, decoded by
:func:`~ctxleak.mitigations.cid.generate_cid` (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4, Eq. 6; bounded: App. B, Alg. 1)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ctxleak.engine.capabilities import WEIGHTS, capabilities_of
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.influence.answers import eos_masked, own_answers
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.methods.influence.ngrams import PromptParts
from ctxleak.methods.rag.passages import list_pieces
from ctxleak.mitigations.cid import CIDConfig, generate_cid
from ctxleak.mitigations.influence import token_influence
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger
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
    pieces = list_pieces([d.text for d in documents])
    example = InfluenceExample(id="request", context="".join(pieces), query=query,
                               reference=None, task="qa",
                               passages=tuple(pieces) if pieces else None)
    return prompt_parts(lm, example, reserve=max_tokens)


def decode_answer(lm: LanguageModel, request: CIDRequest, documents: Sequence[Document],
                  on_entry: Callable[[LedgerEntry], None] | None = None) -> Answer:
    """Decode ``request`` with ``documents`` as its context (those the budget let through).

    At λ = 1 and T = 1 without ε, CID is plain decoding: a served model's server samples the
    answer itself (as ``ctxleak influence`` has it do at that setting), which is scored with and
    without the context; every other setting mixes the two distributions at each step.
    ``on_entry``: called with each released token's ledger entry (the stopping EOS too) as it is
    drawn; the server-sampled answer's all at once, when it has been scored."""
    parts, cut = answer_parts(lm, documents, request.query, request.max_tokens)
    seed = request.seed if request.seed is not None else secrets.randbits(63)
    if request.lam == 1.0 and request.eps is None and request.temperature == 1.0 \
            and WEIGHTS not in capabilities_of(lm):
        ledger = _sampled_by_server(lm, parts, request, seed)
        if on_entry is not None:
            for entry in ledger.entries:
                on_entry(entry)
        return Answer(ledger=ledger, eps_ex_post=None, text=lm.decode(ledger.response_ids),
                      prompt_tokens=len(parts.full), context_tokens_cut=cut, seed=seed)
    greedy = request.temperature is None
    config = CIDConfig(lam=request.lam, temperature=request.temperature or 1.0,
                       max_new_tokens=request.max_tokens, min_new_tokens=request.min_tokens,
                       bounded_eps=request.eps if request.eps is not None else EX_POST_ONLY)
    ledger = generate_cid(lm, parts.full, parts.empty, config, seed, sample=not greedy,
                          on_entry=on_entry)
    ex_post = tuple(float(e.eps_ex_post) for e in ledger.entries if e.eps_ex_post is not None)
    if request.eps is None:  # plain CID: no ε guarantee in the ledger
        ledger = replace(ledger, bounded_eps=None,
                         entries=tuple(replace(e, eps=None) for e in ledger.entries))
    return Answer(ledger=ledger, eps_ex_post=ex_post, text=lm.decode(ledger.response_ids),
                  prompt_tokens=len(parts.full), context_tokens_cut=cut, seed=seed)


def _sampled_by_server(lm: LanguageModel, parts: PromptParts, request: CIDRequest,
                       seed: int) -> RowLedger:
    """Plain decoding (λ = 1, T = 1) of a served model: the answer its server samples, each
    released token (the stopping EOS too, as the model's first EOS id) scored teacher-forced
    with and without the context (Def. 3.1 with n = |D|), EOS masked before ``min_tokens`` as
    when it was drawn."""
    [(ids, stopped)] = own_answers(lm, [parts], [seed], 1.0, request.max_tokens,
                                   request.min_tokens)
    released = list(ids) + ([lm.eos_ids[0]] if stopped and lm.eos_ids else [])
    entries: list[LedgerEntry] = []
    if released:
        lc, le = eos_masked(lm, [parts.full, parts.empty], [released, released],
                            request.min_tokens)
        entries = [LedgerEntry(step=k, token_id=int(t), lam=1.0, logp_context=float(lc[k]),
                               logp_empty=float(le[k]),
                               influence=float(token_influence(float(lc[k]), float(le[k]))))
                   for k, t in enumerate(released)]
    return RowLedger(row=0, entries=tuple(entries), stopped_on_eos=stopped, lam=1.0,
                     temperature=1.0)
