"""What each method needs from the model, given its options (``Method.requires``).

Each function returns ``{capability: why, and what to do instead}``
(:mod:`ctxleak.engine.capabilities`); influence's are stated with the road its run takes
(:mod:`ctxleak.methods.influence.roads`). A served model (log-probs at temperature 1 and samples,
over HTTP) runs: influence of the model's own answers at λ = 1 and T = 1 with n-gram windows,
ICLInf, Monte Carlo susceptibility and ProPILE black-box probing. What needs the full
next-token distributions at every step, gradients or weights is refused before the first
request, by :func:`ctxleak.engine.capabilities.check_capabilities`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctxleak.engine.capabilities import (
    CONTINUATION_LOGPROBS,
    EMBEDDING_GRADIENTS,
    NEXT_TOKEN_DISTRIBUTION,
    NEXT_TOKEN_LOGITS,
    NEXT_TOKEN_LOGPROBS,
    SAMPLING,
    WEIGHTS,
)

IN_PROCESS_HINT = ("run it with the model loaded in-process (no --server-url; Python: "
                   "load_model without server_url)")


def iclinf() -> dict[str, str]:
    """ICLInf ("Evaluating Privacy Leakage From In-Context Learning"): label log-probs under the
    full and leave-one-out prompts."""
    return {CONTINUATION_LOGPROBS: "label sequences are scored under each prompt",
            NEXT_TOKEN_LOGPROBS: "label tokens are scored as next tokens"}


def susceptibility(method: str) -> dict[str, str]:
    """Susceptibility ("Context versus Prior Knowledge in Language Models"): Monte Carlo over
    whole next-token distributions (a served model must return the whole vocabulary's
    log-probs: vLLM's ``--max-logprobs -1``); Fisher over input-embedding gradients."""
    needs = {}
    if method in ("mc", "both"):
        needs[NEXT_TOKEN_DISTRIBUTION] = ("Monte Carlo susceptibility compares whole "
                                          "next-token distributions across contexts: start "
                                          "the vLLM server with --max-logprobs -1, or "
                                          + IN_PROCESS_HINT)
    if method in ("fisher", "both"):
        needs[EMBEDDING_GRADIENTS] = ("Fisher susceptibility differentiates the answer "
                                      "distribution with respect to the context's embeddings: "
                                      "run it with --method mc (Python: method='mc'; Monte "
                                      "Carlo only), or "
                                      + IN_PROCESS_HINT)
    return needs


def probe(modes: Iterable[str], generate: bool, canary: Any) -> dict[str, str]:
    """ProPILE ("ProPILE: Probing Privacy Leakage in Large Language Models"): black-box and
    in-context probing score and generate; white-box probing trains a soft prompt through the
    model, and the canary check fine-tunes it."""
    modes = list(modes)
    needs = {CONTINUATION_LOGPROBS: "the PII continuations are scored under each probe"}
    if generate:
        needs[SAMPLING] = "answers are generated for exact-match leakage"
    if "white-box" in modes:
        needs[EMBEDDING_GRADIENTS] = ("white-box probing trains a soft prompt by gradients "
                                      "through the model: run it with --mode black-box "
                                      "(Python: mode='black-box'), or "
                                      + IN_PROCESS_HINT)
    if canary is not None:
        needs[WEIGHTS] = ("the canary check fine-tunes the model's weights: leave --canary "
                          "unset (Python: canary=None), or " + IN_PROCESS_HINT)
    return needs


def audit() -> dict[str, str]:
    """The DP synthetic-text audit ("Evaluating Privacy Leakage From In-Context Learning" §5):
    the mechanism combines the full next-token distributions of several one-shot prompts."""
    return {NEXT_TOKEN_LOGITS: "the DP mechanism clips and averages the full next-token "
                               "distributions of several prompts at every step: "
                               + IN_PROCESS_HINT,
            SAMPLING: "synthetic texts are sampled"}
