"""Influence of a model's own answers (Context Influence Decoding at λ = 1, T = 1,
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.4):
the :data:`~ctxleak.methods.influence.roads.ANSWERS` road, on any backend of the model
interface (a served model; logged answers in-process are scored the same way).

At λ = 1 CID is plain decoding from the prompt with the context, so the deployed model's own
answer is the CID response: the model samples it (seeded, EOS masked before the minimum
length), then scores it teacher-forced under the prompt with the context, without it, and
without each n-gram window. Only temperature-1 log-probs of given tokens are needed.

The minimum-length rule masks EOS before ``min_new_tokens`` (probability 0), which renormalises
the distribution those tokens were drawn from: ``log p̄(y_t) = log p(y_t) − log(1 − Σ_e p(e))``
over the EOS ids e, the same numbers as :func:`~ctxleak.engine.streams.mask_eos_before_min`
gives in-process. The EOS log-probs come from the server as candidate next tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ctxleak.engine.capabilities import WEIGHTS, capabilities_of
from ctxleak.engine.generation import sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.scoring import continuation_logprobs, next_token_logprobs
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import warn
from ctxleak.methods.influence.ngrams import PromptParts, WindowInfluence, WindowRequest, windows
from ctxleak.mitigations.influence import token_influence
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger

#: How far above 0 an EOS-renormalised log-prob may lie (float32 servers' noise): where it lies
#: further, the token's probability and the EOS mass sum above 1, two answers that disagree.
EOS_SLACK = 1e-4


def eos_masked(lm: LanguageModel, prompts: Sequence[Sequence[int]],
               conts: Sequence[Sequence[int]], min_new_tokens: int) -> list[np.ndarray]:
    """Teacher-forced log-probs of each continuation with EOS masked at its first
    ``min_new_tokens`` positions (float64): ``log p(y_t) − log(1 − Σ_e p(e | prefix))``,
    refused (:class:`ServerError`) where it is above 0 or not finite: the token's probability
    and the EOS mass, answered apart, then sum above 1."""
    eos = list(lm.eos_ids)
    where = [(i, t) for i, c in enumerate(conts) for t in range(min(min_new_tokens, len(c)))] \
        if eos else []
    heads = [list(prompts[i]) + list(conts[i][:t]) for i, t in where]

    def scored() -> list[np.ndarray]:
        return [np.asarray(r, dtype=np.float64)
                for r in continuation_logprobs(lm, prompts, conts, reuse_prefix=True)]

    def eos_mass() -> np.ndarray:
        logp = next_token_logprobs(lm, heads, token_ids=eos).numpy().astype(np.float64)
        return np.asarray(np.exp(logp).sum(axis=1), dtype=np.float64)

    if not where:
        return scored()
    if WEIGHTS in capabilities_of(lm):
        rows, mass = scored(), eos_mass()
    else:  # a server: both sets of requests in flight together, so it batches them
        with ThreadPoolExecutor(2) as pool:
            rows_f, mass_f = pool.submit(scored), pool.submit(eos_mass)
            rows, mass = rows_f.result(), mass_f.result()
    for (i, t), m in zip(where, mass):
        raw = float(rows[i][t])
        rows[i][t] = raw - np.log1p(-min(float(m), 1.0 - 1e-300))
        if not np.isfinite(rows[i][t]) or rows[i][t] > EOS_SLACK:
            raise ServerError(
                f"{lm.describe()} answered inconsistent log-probs: at position {t} of answer "
                f"{i} the EOS tokens hold {float(m):.6g} of the probability and the answer's "
                f"token {raw:.4g} nats, more than 1 together (renormalised without EOS: "
                f"{float(rows[i][t]):.4g} nats > 0): refused, nothing of it is written")
    return rows


def own_answers(lm: LanguageModel, parts: Sequence[PromptParts], seeds: Sequence[int],
                temperature: float, max_new_tokens: int, min_new_tokens: int
                ) -> list[tuple[list[int], bool]]:
    """One answer per prompt with the context, drawn by the model: (ids, stopped on EOS)."""
    gens = sample(lm, [p.full for p in parts], list(seeds), temperature=temperature,
                  max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens)
    return [(list(g[0].token_ids), g[0].stopped_on_eos) for g in gens]


def answer_windows(p: PromptParts, answer: Sequence[int], ngram: int | None, stride: int | None,
                   example: str | int, clipped: set[int], k: int) -> list[tuple[int, int]]:
    """The n-gram windows of the context an answer is scored without: none without ``ngram`` or
    an answer; n cut to the context's length (warned, and ``k`` added to ``clipped``)."""
    if ngram is None or not answer:
        return []
    n = min(ngram, len(p.context))
    if n < ngram:
        warn(f"example {example}: the n-gram size {ngram} (ngram) is larger than its "
             f"context ({len(p.context)} tokens): using n = {n}", param="ngram")
        clipped.add(k)
    return windows(len(p.context), n, stride)


@dataclass(frozen=True)
class AnswersToScore:
    """Answers already drawn, one per prompt (``parts``): (token ids, stopped on EOS), each
    scored at its ``lam`` and ``temperature`` with EOS masked before ``min_new_tokens``, and
    without each of its n-gram windows (``ngram``, ``stride``; ``ids`` name the examples in
    warnings) and each of its ``passages`` (one list of context spans per answer)."""

    parts: Sequence[PromptParts]
    responses: Sequence[tuple[list[int], bool]]
    lam: Sequence[float]
    temperature: Sequence[float]
    min_new_tokens: int
    ngram: int | None
    stride: int | None
    ids: Sequence[str | int]
    passages: Sequence[Sequence[tuple[int, int]]] | None = None

    def spans(self, k: int, clipped: set[int]) -> list[tuple[int, int]]:
        """The context spans answer ``k`` is scored without: its n-gram windows
        (:func:`answer_windows`, ``k`` added to ``clipped`` where n was cut), then its passages'
        spans (Def. 3.1 with S = the passage); none without an answer."""
        answer = self.responses[k][0]
        if not answer:
            return []
        extra = list(self.passages[k]) if self.passages is not None else []
        return answer_windows(self.parts[k], answer, self.ngram, self.stride, self.ids[k],
                              clipped, k) + extra

    def request(self, k: int, spans: list[tuple[int, int]], *,
                with_empty: bool = False) -> WindowRequest:
        """The scoring request of answer ``k`` without each of ``spans``, at its λ and T."""
        return WindowRequest(self.parts[k], list(self.responses[k][0]), spans,
                             lam=float(self.lam[k]), temperature=float(self.temperature[k]),
                             min_new_tokens=self.min_new_tokens, with_empty=with_empty)

    def ledger(self, k: int, tokens: Sequence[int], full: np.ndarray, empty: np.ndarray,
               stopped: bool) -> RowLedger:
        """Answer ``k``'s ledger: each of ``tokens`` with its log-probs with (``full``) and
        without (``empty``) the context and its token influence (Def. 3.1 with n = |D|)."""
        entries = tuple(LedgerEntry(step=t, token_id=int(tok), lam=float(self.lam[k]),
                                    logp_context=float(full[t]), logp_empty=float(empty[t]),
                                    influence=float(token_influence(full[t], empty[t])))
                        for t, tok in enumerate(tokens))
        return RowLedger(row=k, entries=entries, stopped_on_eos=stopped,
                         lam=float(self.lam[k]), temperature=float(self.temperature[k]))


class ScoredAnswers(NamedTuple):
    """What a scorer of :class:`AnswersToScore` gives: each answer's ledger and, where it was
    scored without some spans, its window request and influence (else None); and which answers'
    n was clipped to the context."""

    ledgers: list[RowLedger]
    requests: list[WindowRequest | None]
    windows: list[WindowInfluence | None]
    clipped: set[int]


#: A scorer of answers already drawn: :func:`score_responses`, or the in-process one of
#: :mod:`ctxleak.methods.influence.pipeline`.
Scorer = Callable[[LanguageModel, AnswersToScore], ScoredAnswers]


def score_responses(lm: LanguageModel, answers: AnswersToScore) -> ScoredAnswers:
    """The ledger of each answer (log-probs with and without the context, token influence) and,
    with ``ngram`` or ``passages``, its window request and influence: the n-gram windows first,
    then the passages; and which n were clipped to the context. All from the server's
    temperature-1 log-probs, in one round of requests."""
    stop = list(lm.eos_ids[:1])
    drawn = [ids_ + (stop if stopped else []) for ids_, stopped in answers.responses]
    prompts: list[list[int]] = []
    conts: list[list[int]] = []
    spans_of: list[list[tuple[int, int]]] = []
    clipped: set[int] = set()
    for k, (p, (resp, _)) in enumerate(zip(answers.parts, answers.responses)):
        prompts += [p.full, p.empty]
        conts += [drawn[k], drawn[k]]
        spans = answers.spans(k, clipped)
        for a, b in spans:
            prompts.append(p.without(a, b))
            conts.append(list(resp))
        spans_of.append(spans)
    scored = eos_masked(lm, prompts, conts, answers.min_new_tokens)
    out = ScoredAnswers([], [], [], clipped)
    at = 0
    for k, (resp, stopped) in enumerate(answers.responses):
        full, empty = scored[at], scored[at + 1]
        at += 2
        out.ledgers.append(answers.ledger(k, drawn[k], full, empty, stopped))
        spans = spans_of[k]
        if not spans:
            out.requests.append(None)
            out.windows.append(None)
            continue
        ablated = np.stack(scored[at:at + len(spans)])
        at += len(spans)
        out.requests.append(answers.request(k, spans))
        out.windows.append(WindowInfluence(spans, full[:len(resp)], ablated, empty[:len(resp)]))
    return out
