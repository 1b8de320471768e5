"""A model's own answer at λ = 1, sampled by the model and scored teacher-forced (Context
Influence Decoding at λ = 1 is plain decoding, "Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.4): what a served model's server samples
itself, for the influence run and the privacy proxy alike.

The minimum-length rule masks EOS before ``min_new_tokens`` (probability 0), which renormalises
the distribution those tokens were drawn from: ``log p̄(y_t) = log p(y_t) − log(1 − Σ_e p(e))``
over the EOS ids e, the same numbers as :func:`~ctxleak.engine.streams.mask_eos_before_min`
gives in-process. The EOS log-probs come from the server as candidate next tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ctxleak.engine.capabilities import WEIGHTS, capabilities_of
from ctxleak.engine.generation import sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.scoring import continuation_logprobs, next_token_logprobs
from ctxleak.engine.served_client import ServerError
from ctxleak.mitigations.prompts import PromptParts

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


__all__ = ["EOS_SLACK", "eos_masked", "own_answers"]
