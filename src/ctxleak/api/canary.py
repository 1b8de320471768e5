"""``ctxleak.canary_audit``: an attack's empirical ε lower bound beside bounded Context Influence
Decoding's guarantee, by membership inference with planted canaries ("Auditing Differentially
Private Machine Learning: How Private is Private SGD?"; :mod:`ctxleak.methods.attacks.canary`).
``ctxleak.canary_audit_proxy``: the same audit of a running ``ctxleak serve``, whatever defence
it deploys, beside the claim its answers say (:mod:`ctxleak.methods.attacks.canary_proxy`)."""

from __future__ import annotations

from typing import Any, cast

from typing_extensions import Unpack

from ctxleak.api.docs import MODEL_DOC, PROGRESS_DOC, documented
from ctxleak.api.running import Bound, RunKeywords, keywords, run_method, run_options
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.served_options import check_request_timeout
from ctxleak.methods.attacks.canary import CANARY_QUERY, CANARY_SENTENCE, CONFIDENCE, plant_canaries
from ctxleak.methods.attacks.canary_method import CanaryMethod, CanaryParams
from ctxleak.methods.attacks.canary_proxy import proxy_summary, proxy_trials
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.results import CanaryResult
from ctxleak.run.inputs import describe
from ctxleak.targets.endpoint import ChatEndpointTarget

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


def canary_audit_proxy(endpoint: str, endpoint_model: str, data: Any = "demo-qa", *,
                       copies: int = 1, trials: int = 40, digits: int = 6,
                       temperature: float = 0.8, max_new_tokens: int = 8,
                       min_new_tokens: int | None = None, seed: int = 0,
                       confidence: float = CONFIDENCE, threshold: float | None = None,
                       api_key_env: str | None = None, concurrency: int = 4,
                       request_timeout: float | None = None,
                       seeded: bool = False) -> CanaryResult:
    """The canary audit of a running ``ctxleak serve`` (``endpoint``: its ``…/v1`` URL,
    ``endpoint_model`` the name it serves, its key from the environment variable
    ``api_key_env``): ``trials`` canaries of ``digits`` digits planted in ``data``'s documents
    as :func:`canary_audit` plants them, each trial sent as one request whose marked context is
    ``copies`` documents holding it (as many as the shards of a DP vote, so that every voter
    reads it), answered by the proxy's defence at ``temperature`` with ``min_new_tokens``
    (default ``max_new_tokens``) to ``max_new_tokens`` tokens, ``concurrency`` at a time. The
    summary holds the lower bound beside the guarantee the answers' claim gives between a
    trial's two contexts (group privacy; δ taken off the bound) and the law. Each trial's
    documents are charged to the proxy's budgets under ids of their own (``trial-N/k``).
    ``seeded``: send each trial's seed (to a proxy started with ``--audit-seeds``, whose
    answers then repeat the in-process audit's); by default none, as a deployed proxy draws a
    DP answer's noise from its own secret and refuses a client's seed. Returns the Result
    unsaved (``.save(folder)`` writes it)."""
    timeout = check_request_timeout(request_timeout)
    target = ChatEndpointTarget(
        endpoint, endpoint_model, api_key_env=api_key_env, max_tokens=max_new_tokens,
        temperature=temperature, concurrency=concurrency, timeout_s=timeout or 60.0,
        extra_body={"min_tokens": max_new_tokens if min_new_tokens is None else min_new_tokens})
    planted = plant_canaries(load_examples(data, task="summarization"), trials, seed, digits)
    records = proxy_trials(target, planted, copies=copies, seed=seed, seeded=seeded)
    summary = proxy_summary(records, seed=seed, confidence=confidence, threshold=threshold)
    summary.update({"target": target.describe(), "copies": copies, "temperature": temperature,
                    "max_new_tokens": max_new_tokens})
    config = {"command": "canary", "data": describe(data), "endpoint": target.describe(),
              "copies": copies, "trials": trials, "digits": digits, "temperature": temperature,
              "max_new_tokens": max_new_tokens, "min_new_tokens": min_new_tokens,
              "seed": seed, "seeded": seeded, "confidence": confidence,
              "threshold": threshold,
              "canary_sentence": CANARY_SENTENCE, "query": CANARY_QUERY}
    return CanaryResult(records=records, summary=summary, config=config)
