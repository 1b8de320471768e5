"""Influence of a model's own answers (Context Influence Decoding at λ = 1, T = 1,
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.4):
the :data:`~ctxleak.methods.influence.roads.ANSWERS` road, on any backend of the model
interface (a served model; logged answers in-process are scored the same way).

At λ = 1 CID is plain decoding from the prompt with the context, so the deployed model's own
answer is the CID response: the model samples it (seeded, EOS masked before the minimum
length), then scores it teacher-forced under the prompt with the context, without it, and
without each n-gram window. Only temperature-1 log-probs of given tokens are needed.

The sampling and the EOS-renormalised scoring are :mod:`ctxleak.mitigations.sampled`'s (the
privacy proxy's too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import warn
from ctxleak.methods.influence.ngrams import PromptParts, WindowInfluence, WindowRequest, windows
from ctxleak.mitigations.ledger import RowLedger
from ctxleak.mitigations.sampled import EOS_SLACK, eos_masked, own_answers

__all__ = ["EOS_SLACK", "AnswersToScore", "ScoredAnswers", "Scorer", "answer_windows",
           "eos_masked", "own_answers", "score_responses"]


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
        return RowLedger.from_scores(k, tokens, full, empty, lam=float(self.lam[k]),
                                     temperature=float(self.temperature[k]),
                                     stopped_on_eos=stopped)


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
