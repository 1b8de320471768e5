"""CID's ledger of one response, and the ledgers of (prompt with the context, prompt without
it, (CID, Decoding) as CIDConfig gives them, seed) jobs, each under its own setting, decoded
together through the one door of CID (:meth:`ctxleak.mitigations.cid.CID.answer_group`, as the
influence run measures)."""

from __future__ import annotations

from dataclasses import replace

from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.mechanisms import AnswerRequest, Asked


def cid_ledger(lm, prompt_context, prompt_empty, config, seed, use_cache=True, sample=True):
    """One response's ledger drawn by CID from the prompt with the context and the one without
    it (:meth:`CID.answer`; ``use_cache`` False: every step recomputes the whole prompt)."""
    cid, decoding = config[0], replace(config[1], greedy=not sample)
    full, empty = list(prompt_context), list(prompt_empty)
    request = AnswerRequest(("context",), lambda texts: full if texts else empty, seed)
    [answer] = cid.answer(lm, [request], decoding, use_cache=use_cache)
    return answer.ledger


def cid_ledgers(lm, jobs, sample=True, deployed=False):
    """One ledger per job, in order (``sample`` False: greedy CID; ``deployed``: as the privacy
    proxy answers, plain CID's ledgers keep each step's ex-post ε)."""
    asked = []
    for full, empty, config, seed in jobs:
        cid, decoding = config[0], replace(config[1], greedy=not sample)
        prompt = (lambda f, e: lambda texts: list(f) if texts else list(e))(full, empty)
        asked.append(Asked(cid, AnswerRequest(("context",), prompt, seed), decoding))
    return [a.ledger for a in CID().answer_group(lm, asked, deployed=deployed)]
