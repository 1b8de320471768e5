"""What a context influence figure means: its unit, and its reading as a likelihood ratio and as
the ε of ex-post per-instance differential privacy.

"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" defines the
influence of the context D on a response y (Def. 3.1-3.2) as ``Σ_t |log p̄_λ(y_t | D, x, y<t) −
log p̄_λ(y_t | D∖S, x, y<t)|``: natural logarithms, so **nats**, summed over the response's
tokens (it grows with the response's length; per token it does not). Its Def. 2.2 (ex-post
per-instance DP) bounds ``|log Pr[A(D) = o] / Pr[A(D∖S) = o]|`` by ε(o, D, D∖S) at the outcome o
actually released: the response influence is that ε for this response, with the per-token losses
added up by basic composition (so it is at least the response's own log-likelihood ratio). Read
as a likelihood ratio, ``e^x``: the response is up to e^x times more (or less) likely with the
context than without it, the odds by which an attacker who sees it can tell whether S was in the
context.

For scale, deployed DP mechanisms are read as strong at ε ≤ 1 and loose at ε ≈ 8 or more
(:func:`dp_scale`); ex-post figures are per response and context, not a worst-case guarantee.
"""

from __future__ import annotations

import math

#: The unit of every influence figure (Def. 3.1-3.2 use natural logarithms).
UNIT = "nats"
#: ε at or below which DP is usually called strong, and around which it is called loose.
STRONG_EPS = 1.0
LOOSE_EPS = 8.0

UNITS = {
    "influence": "nats, summed over the response's tokens (Def. 3.2); the ε of ex-post "
                 "per-instance DP (Def. 2.2) at this response",
    "influence_per_token": "nats per response token (the response influence over its length)",
    "likelihood_ratio": "e^influence: how many times more (or less) likely the response is "
                        "with the context than without it",
    "control_influence": "nats: the same response scored with another example's context "
                         "instead of its own",
    "influence_above_control": "nats: influence minus the control's (the nearest one's)",
    "control_influences": "nats: the response scored with each control context, nearest first",
    "control_p": "share: (1 + controls at or above the influence) / (controls + 1), how often a "
                 "context that adds nothing would score as high among these controls",
    "passage_influence": "nats: Def. 3.1-3.2 with S = the passage (left out, response scored)",
    "window_influence": "nats: Def. 3.1-3.2 with S = the n-gram window",
}


def likelihood_ratio(nats: float | None) -> float | None:
    """``e^x`` (inf where it overflows a float), None for None."""
    if nats is None:
        return None
    try:
        return math.exp(nats)
    except OverflowError:
        return math.inf


def format_ratio(nats: float) -> str:
    """``e^x`` written for a reader: ``×2.7``, ``×1.2e+05``, or ``×e^812`` past a float."""
    ratio = likelihood_ratio(nats)
    if ratio is None or math.isinf(ratio):
        return f"×e^{nats:.4g}"
    return f"×{ratio:.2g}" if ratio < 1e4 else f"×{ratio:.1e}"


def dp_scale(eps: float) -> str:
    """One sentence placing an ex-post ε beside the budgets DP users know."""
    if eps <= STRONG_EPS:
        return f"ε = {eps:.3g} is within what DP calls a strong budget (ε ≤ {STRONG_EPS:g})"
    if eps <= LOOSE_EPS:
        return (f"ε = {eps:.3g} lies between a strong DP budget (ε ≤ {STRONG_EPS:g}) and a "
                f"loose one (ε ≈ {LOOSE_EPS:g})")
    return (f"ε = {eps:.3g} is beyond even a loose DP budget (ε ≈ {LOOSE_EPS:g}): a guarantee "
            f"that allowed this response would protect little")


def reading(nats: float, tokens: int | None = None) -> str:
    """``influence x nats (y per token), likelihood ratio ×e^x, ε = x: <scale>``."""
    per = f" ({nats / tokens:.3g} {UNIT} per token)" if tokens else ""
    return (f"{nats:.4g} {UNIT}{per}, likelihood ratio {format_ratio(nats)}; read as ex-post "
            f"per-instance DP, {dp_scale(nats)}")


__all__ = ["LOOSE_EPS", "STRONG_EPS", "UNIT", "UNITS", "dp_scale", "format_ratio",
           "likelihood_ratio", "reading"]
