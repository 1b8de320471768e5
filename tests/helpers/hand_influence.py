"""Context influence written out by hand for tests: every prompt forwarded alone from scratch
(no engine, no KV cache), float64 (paper 000)."""

from __future__ import annotations

import numpy as np
import torch


def _last_logits(lm, ids):
    with torch.no_grad():
        return lm.model(torch.tensor([list(ids)])).logits[0, -1].double()


def hand_unigram_influence(lm, parts, prefix, token, lam, temperature, mask_eos):
    """Paper 000, Table 1 written out: delete context token i, forward from scratch, mix
    λ·z(·|D∖{d_i}) + (1−λ)·z(·|∅) (EOS masked when the token was drawn under the mask)."""
    after = list(parts.after) + list(prefix)

    def logp(context):
        z = _last_logits(lm, list(parts.before) + list(context) + after)
        z0 = _last_logits(lm, list(parts.before) + after)
        if mask_eos:
            z[lm.eos_ids] = -1e30
            z0[lm.eos_ids] = -1e30
        return float(torch.log_softmax((lam * z + (1 - lam) * z0) / temperature, -1)[token])

    full = logp(parts.context)
    ctx = list(parts.context)
    return np.array([abs(full - logp(ctx[:i] + ctx[i + 1:])) for i in range(len(ctx))])



def hand_bounded_lambda(z, z0, eps, lam_max, temperature, valid, steps=60):
    """Paper 000, Alg. 1 line 2 written out: the largest λ in [0, λ_max] with
    max_y |log p̄_λ(y) − log p(y|∅)| ≤ ε/2 over the drawable tokens, by plain bisection."""
    base = torch.log_softmax(z0 / temperature, -1)

    def gap(lam):
        mixed = torch.log_softmax((lam * z + (1 - lam) * z0) / temperature, -1)
        return float((mixed - base).abs()[valid].max())

    if gap(lam_max) <= eps / 2:
        return lam_max
    lo, hi = 0.0, lam_max
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) <= eps / 2 else (lo, mid)
    return lo


def hand_bounded_window_logp(lm, parts, response, spans, eps, lam_max, temperature, min_new):
    """Bounded CID's log p̄(y_t | C) for C = D and for each C = D∖D_i (Def. 3.1 with Thm B.1):
    every prompt forwarded alone from scratch at every step, and each context's own λ_t from
    :func:`hand_bounded_lambda` on its own logits. Returns ``(logp_full [T], logp [W, T])``."""
    after = list(parts.after)
    ctx = list(parts.context)

    def logp(context):
        out = []
        for t, token in enumerate(response):
            prefix = after + list(response[:t])
            z = _last_logits(lm, list(parts.before) + list(context) + prefix)
            z0 = _last_logits(lm, list(parts.before) + prefix)
            valid = torch.ones_like(z, dtype=torch.bool)
            if t < min_new:
                z[lm.eos_ids] = z0[lm.eos_ids] = -1e30
                valid[lm.eos_ids] = False
            lam = hand_bounded_lambda(z, z0, eps, lam_max, temperature, valid)
            out.append(float(torch.log_softmax((lam * z + (1 - lam) * z0) / temperature,
                                               -1)[token]))
        return np.array(out)

    return logp(ctx), np.stack([logp(ctx[:a] + ctx[b:]) for a, b in spans])
