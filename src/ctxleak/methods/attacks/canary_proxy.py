"""The canary audit of a running ``ctxleak serve``, the deployed defence asked as any client asks
it ("Auditing Differentially Private Machine Learning: How Private is Private SGD?": an
attack's empirical ε lower bound beside the claim; :mod:`.canary` has the trials and the maths).

The in-process audit (:mod:`.canary_method`) draws the trials' responses by CID on a model it
holds. Here the proxy answers them, whatever defence it deploys (bounded CID, a DP vote over
shards, DP-RAG, scrubbing), so what is audited is what the proxy releases:

1. each trial (:func:`.canary.plant_canaries`) is one chat request (:func:`trial_request`): the
   trial's question as the user's message, its context (the canary's sentence and the document)
   as the request's marked documents, ``copies`` of them (so that every voter of a DP vote over
   ``copies`` shards reads the canary), and the trial's own seed;
2. the attacker scores each answer's text alone (:func:`.canary.attack_score`);
3. each answer says the claim it was released under, per response over the proxy's neighbouring
   relation (:func:`ctxleak.targets.endpoint.served_claim`); :func:`neighbour_guarantee` turns
   it into the (ε, δ) between the trial's two contexts (the target or the other canary in every
   copy) by group privacy, and the law holds the lower bound, with that δ taken off
   (:func:`.canary.summarize_trials`), under that ε.

The documents' ids are the trial's (``trial-3/0`` …): each trial's canary is charged to ids of
its own, as the proxy charges any document.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ctxleak.engine.generation import derive_seed
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_method import claim_fields
from ctxleak.methods.attacks.canary import CanaryTrial, attack_score, summarize_trials
from ctxleak.methods.attacks.lower_bound import CONFIDENCE
from ctxleak.mitigations.mechanisms import Claim
from ctxleak.targets.endpoint import ChatEndpointTarget, ChatRequest


def trial_request(trial: CanaryTrial, copies: int, seed: int, *,
                  seeded: bool = True) -> ChatRequest:
    """One trial as ``ctxleak serve``'s chat request (module docstring, step 1): its seed is
    the in-process audit's (``seed``, trial number); ``seeded`` False: no seed (a deployed
    proxy draws a DP answer's noise from its own secret and refuses a client's)."""
    docs = [{"id": f"{trial.key}/{k}", "text": trial.context} for k in range(copies)]
    return ChatRequest(({"role": "user", "content": trial.query},),
                       extra_body={"ctxleak": {"documents": docs}},
                       seed=derive_seed(seed, trial.trial) if seeded else None, label=trial.key)


def neighbour_guarantee(claim: Claim | None, copies: int) -> tuple[float | None, float]:
    """The (ε, δ) a claim per response gives between a trial's two contexts, which differ in
    the ``copies`` documents that hold the canary: ``context`` (any replacement of the whole
    context) one step; ``shard`` one step per shard changed, at most ``copies``; ``document``
    (adding or removing one) two steps per copy, each replaced by removing it and adding the
    other. Over k steps group privacy gives (k·ε, δ·Σ_{i<k} e^{i·ε}) (each step's bound
    applied to the last). ε None: no guarantee (scrubbing, plain CID, a target that says
    nothing)."""
    if claim is None or claim.eps is None:
        return None, 0.0
    steps = {"context": 1, "shard": copies, "document": 2 * copies}[claim.relation]
    delta = claim.delta * sum(math.exp(i * claim.eps) for i in range(steps))
    return steps * claim.eps, min(delta, math.nextafter(1.0, 0.0))  # δ ≥ 1 says nothing


def proxy_trials(endpoint: ChatEndpointTarget, trials: Sequence[CanaryTrial], *,
                 copies: int = 1, seed: int = 0, seeded: bool = True) -> list[dict[str, Any]]:
    """Each trial's record, its answer drawn by the proxy at ``endpoint`` (module docstring):
    the coin and both canaries, the answer, the attacker's ``score``, the claim the answer
    says (``claim_eps``, ``claim_delta``, ``claim_relation``) and the guarantee between the
    trial's contexts (``composed_eps``, None without one, and ``composed_delta``)."""
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ConfigError(f"copies must be an integer >= 1, not {copies!r}", param="copies")
    answers = endpoint.answers([trial_request(t, copies, seed, seeded=seeded) for t in trials])
    out = []
    for trial, answer in zip(trials, answers, strict=True):
        eps, delta = neighbour_guarantee(answer.claim, copies)
        out.append({"id": trial.key, "trial": trial.trial, "document_id": trial.document_id,
                    "canary": trial.canary, "other": trial.other, "included": trial.included,
                    "response": answer.text, **claim_fields(answer), "composed_eps": eps,
                    "composed_delta": delta, "score": attack_score(answer.text, trial.canary)})
    return out


def proxy_summary(records: Sequence[dict[str, Any]], *, seed: int = 0,
                  confidence: float = CONFIDENCE, threshold: float | None = None
                  ) -> dict[str, Any]:
    """The canary audit's summary (:func:`.canary.summarize_trials`) held against the largest
    guarantee of the answers, its δ the largest ``composed_delta``."""
    delta = max((float(r.get("composed_delta") or 0.0) for r in records), default=0.0)
    return summarize_trials(records, seed=seed, confidence=confidence, threshold=threshold,
                            delta=delta)


__all__ = ["neighbour_guarantee", "proxy_summary", "proxy_trials", "trial_request"]
