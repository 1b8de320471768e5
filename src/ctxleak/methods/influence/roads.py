"""Which road an influence run takes, and what it needs, in one place.

- :data:`DECODE`: Context Influence Decoding ("Estimating Privacy Leakage of Augmented
  Contextual Knowledge in Language Models", Alg. 1): the response decoded from the λ-mixture of
  the next-token distributions with and without the context, at temperature T. It needs the
  whole next-token distribution at every step: the logits in-process, or every token's log-prob
  from a vLLM server (one request per stream and step; the same numbers up to one constant per
  step, which the mixture's softmax removes).
- :data:`ANSWERS`: the model's own answers, sampled from their seeds and then scored with and
  without the context (any backend that samples and scores continuations: a served model). At
  λ = 1 and T = 1 CID's distribution is the model's own, so both roads estimate the same
  quantity, and a served model takes this road there: the server samples in one request per
  answer instead of one per token.

:func:`road` is what both the run's check (``Method.requires``, before the first request) and the
measuring (:func:`ctxleak.methods.influence.pipeline.measure_examples`) call, so what is checked
and what is done cannot drift apart (as dp_accounting's ``supports`` and ``compose`` share one
traversal).
"""

from __future__ import annotations

from collections.abc import Iterable

from ctxleak.engine.capabilities import (
    CONTINUATION_LOGPROBS,
    NEXT_TOKEN_DISTRIBUTION,
    SAMPLING,
    WEIGHTS,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.lm import LanguageModel

#: CID decoding with the full logits (in-process).
DECODE = "decode"
#: The model's own answers, sampled then scored (λ = 1, T = 1 on a model without its weights
#: here).
ANSWERS = "answers"


def road(lm: LanguageModel, lams: Iterable[float], temperatures: Iterable[float],
         bounded_eps: float | None, *, what: str = "this influence run") -> str:
    """The road ``lm`` takes at these settings (:data:`DECODE` or :data:`ANSWERS`), its needs
    (:func:`influence_needs`: capability -> why, and what to do instead) checked against what
    ``lm`` declares (a backend that lacks one is refused, naming why and what to do instead): a
    model with its weights here always decodes; another decodes where a setting needs the
    mixture (λ ≠ 1, bounded CID, T ≠ 1) and otherwise has its own answers sampled."""
    needs = influence_needs(lams, temperatures, bounded_eps)
    decodes = WEIGHTS in capabilities_of(lm) or NEXT_TOKEN_DISTRIBUTION in needs
    check_capabilities(lm, needs, what=what)
    return DECODE if decodes else ANSWERS


#: What to do where the whole next-token distribution is missing (the end of a refusal).
DISTRIBUTION_HINT = ("start the vLLM server with --max-logprobs -1 (every token's log-prob, "
                     "one request per token), or load the model in-process (no --server-url; "
                     "Python: load_model without server_url)")


def influence_needs(lams: Iterable[float], temperatures: Iterable[float],
                    bounded_eps: float | None) -> dict[str, str]:
    """Influence (Context Influence Decoding, "Estimating Privacy Leakage of Augmented
    Contextual Knowledge in Language Models"): the response sampled, then scored with and
    without the context (and each n-gram window). λ ≠ 1, bounded CID and T ≠ 1 need the whole
    next-token distribution at every step."""
    needs = {CONTINUATION_LOGPROBS: "the response is scored with and without the context",
             SAMPLING: "the response is drawn from the model"}
    lams, temps = list(lams), list(temperatures)
    if bounded_eps is not None:
        why = ("bounded CID searches the largest safe λ_t over the whole next-token "
               "distributions at every step: ")
    elif any(lam != 1 for lam in lams):
        why = ("CID at λ ≠ 1 mixes the whole next-token distributions with and without the "
               "context at every step: run it at --lambda 1 (Python: lambda_=1; the deployed "
               "model's own answers), or ")
    elif any(t != 1 for t in temps):
        why = ("influence at temperature T ≠ 1 renormalises the whole next-token distribution "
               "at every step: run it at --temperature 1 (Python: temperature=1), or ")
    else:
        return needs
    needs[NEXT_TOKEN_DISTRIBUTION] = why + DISTRIBUTION_HINT
    return needs
