"""Which road an influence run takes, and what it needs, in one place.

- :data:`DECODE`: Context Influence Decoding in-process ("Estimating Privacy Leakage of
  Augmented Contextual Knowledge in Language Models", Alg. 1): the response decoded from the
  λ-mixture of the next-token distributions with and without the context, at temperature T.
  It needs the full next-token logits at every step.
- :data:`ANSWERS`: the model's own answers, sampled from their seeds and then scored with and
  without the context (any backend that samples and scores continuations: a served model). At
  λ = 1 and T = 1 CID's distribution is the model's own, so both roads estimate the same
  quantity; λ ≠ 1, T ≠ 1 and bounded CID need the logits and are refused here.

:func:`road` is what both the run's check (``Method.requires``, before the first request) and the
measuring (:func:`ctxleak.methods.influence.pipeline.measure_examples`) call, so what is checked
and what is done cannot drift apart (as dp_accounting's ``supports`` and ``compose`` share one
traversal).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ctxleak.engine.capabilities import (
    CONTINUATION_LOGPROBS,
    NEXT_TOKEN_LOGITS,
    SAMPLING,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.needs import IN_PROCESS_HINT

#: CID decoding with the full logits (in-process).
DECODE = "decode"
#: The model's own answers, sampled then scored (λ = 1, T = 1; any backend).
ANSWERS = "answers"


@dataclass(frozen=True)
class Road:
    """The road of an influence run: its ``name`` (:data:`DECODE` or :data:`ANSWERS`) and what
    it needs (capability -> why, and what to do instead)."""

    name: str
    needs: dict[str, str]


def road(lm: LanguageModel, lams: Iterable[float], temperatures: Iterable[float],
         bounded_eps: float | None, *, what: str = "this influence run") -> Road:
    """The road ``lm`` takes at these settings, its needs checked against what ``lm`` declares
    (a backend that lacks one is refused, naming why and what to do instead)."""
    taken = Road(DECODE if NEXT_TOKEN_LOGITS in capabilities_of(lm) else ANSWERS,
                 influence_needs(lams, temperatures, bounded_eps))
    check_capabilities(lm, taken.needs, what=what)
    return taken


def influence_needs(lams: Iterable[float], temperatures: Iterable[float],
              bounded_eps: float | None) -> dict[str, str]:
    """Influence (Context Influence Decoding, "Estimating Privacy Leakage of Augmented
    Contextual Knowledge in Language Models"): the response sampled, then scored with and
    without the context (and each n-gram window). λ ≠ 1, bounded CID and T ≠ 1 need the whole
    next-token distribution."""
    needs = {CONTINUATION_LOGPROBS: "the response is scored with and without the context",
             SAMPLING: "the response is drawn from the model"}
    lams, temps = list(lams), list(temperatures)
    if bounded_eps is not None:
        needs[NEXT_TOKEN_LOGITS] = ("bounded CID searches the largest safe λ_t over the full "
                                    "next-token distributions at every step: "
                                    + IN_PROCESS_HINT)
    elif any(lam != 1 for lam in lams):
        needs[NEXT_TOKEN_LOGITS] = ("CID at λ ≠ 1 mixes the full next-token distributions "
                                    "with and without the context at every step: "
                                    "run it at --lambda 1 (Python: lambda_=1; the deployed model's own "
                                    "answers), or "
                                    + IN_PROCESS_HINT)
    elif any(t != 1 for t in temps):
        needs[NEXT_TOKEN_LOGITS] = ("influence at temperature T ≠ 1 renormalises the whole "
                                    "next-token distribution, and a served model returns "
                                    "log-probs at temperature 1 only: run it at --temperature 1 "
                                    "(Python: temperature=1), or "
                                    + IN_PROCESS_HINT)
    return needs
