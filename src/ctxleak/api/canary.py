"""``ctxleak.canary_audit``: an attack's empirical ε lower bound beside bounded Context Influence
Decoding's guarantee, by membership inference with planted canaries ("Auditing Differentially
Private Machine Learning: How Private is Private SGD?"; :mod:`ctxleak.methods.attacks.canary`)."""

from __future__ import annotations

from typing import Any, cast

from typing_extensions import Unpack

from ctxleak.api.docs import MODEL_DOC, PROGRESS_DOC, documented
from ctxleak.api.running import Bound, RunKeywords, keywords, run_method, run_options
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.attacks.canary import CONFIDENCE
from ctxleak.methods.attacks.canary_method import CanaryMethod, CanaryParams
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.results import CanaryResult

#: The keywords of :func:`canary_audit` besides the run options (``**run``).
CANARY_DOCS = {
    "model": MODEL_DOC,
    "data": "The documents the canaries are planted in: ``demo-qa`` (bundled), a JSONL/CSV "
            "path with a context field, or a list of dicts; used in turn.",
    "progress": PROGRESS_DOC,
    "lambda_": "Context influence level λ >= 0 (one value; the upper bound of λ_t with "
               "``bounded_eps``).",
    "temperature": "Sampling temperature > 0.",
    "bounded_eps": "Bounded CID: ε-DP per released token (App. B); None: plain CID, no "
                   "guarantee.",
    "max_new_tokens": "Most new tokens of each response.",
    "min_new_tokens": "EOS is masked before this many tokens (default: ``max_new_tokens``, so "
                      "every response releases the same number of tokens).",
    "trials": "Canary trials (half choose the threshold, half measure the rates).",
    "digits": "Digits of each random canary (an account number).",
    "confidence": "Confidence of the ε lower bound (Clopper–Pearson, split between the two "
                  "rates).",
    "threshold": "A score threshold fixed in advance (characters of the canary the response "
                 "repeats): every trial then measures. None: chosen on half of the trials.",
}


@documented(CANARY_DOCS,
            '``summary["eps_lower"]`` (nats) is the attack\'s ε lower bound at ``confidence``, '
            '``summary["eps_guarantee"]`` the largest composed ε of the responses (None '
            'unbounded) and ``summary["law"]`` ``holds``, ``violated`` or ``no guarantee``; '
            "one record per trial (its coin, canaries, response and score). None on the other "
            "processes of a data-parallel launch.")
@keywords
def canary_audit(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo-qa", *,
                 progress: bool = True, lambda_: float = 1.0, temperature: float = 0.8,
                 bounded_eps: float | None = None, max_new_tokens: int = 8,
                 min_new_tokens: int | None = None, trials: int = 40, digits: int = 6,
                 confidence: float = CONFIDENCE, threshold: float | None = None,
                 **run: Unpack[RunKeywords]) -> CanaryResult | None:
    """A canary audit of CID (``ctxleak canary``): ``trials`` random canaries, each planted in
    a document or replaced by another by a recorded coin, the response drawn under the setting,
    the attacker's score per response, and the empirical ε lower bound beside the guarantee.
    """
    common, lm = run_options(model, bound)
    decoding = CIDConfig(lam=lambda_, temperature=temperature, max_new_tokens=max_new_tokens,
                         min_new_tokens=max_new_tokens if min_new_tokens is None
                         else min_new_tokens, bounded_eps=bounded_eps)
    method = CanaryMethod(common, CanaryParams(decoding, trials=trials, digits=digits,
                                               confidence=confidence, threshold=threshold))
    return cast("CanaryResult | None", run_method(method, lm, data, progress=progress))
