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

