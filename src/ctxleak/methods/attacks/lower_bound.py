"""An attack's empirical ε lower bound, and the law that holds it under the guarantee.

DP is audited by what an attacker can actually distinguish ("Auditing Differentially Private
Machine Learning: How Private is Private SGD?", Jagielski et al. 2020; "Adversary Instantiation:
Lower Bounds for Differentially Private Machine Learning", Nasr et al. 2021); the canary audit
and the membership attacks' ROC read their trials' scores so:

1. :func:`audit_scores` picks the threshold ("score ≥ t means the target was planted") on one
   seeded half of the trials (half of each side of the coin) and counts true and false positives
   on the other half, or, for a threshold fixed in advance, on all trials: a threshold picked on
   the trials it is measured on inflates the bound.
2. :func:`eps_lower_bound`: for pure ε-DP every test has TPR ≤ e^ε·FPR and
   1 − FPR ≤ e^ε·(1 − TPR) (Jagielski et al. 2020, Thm 1 with δ = 0). With a one-sided
   Clopper–Pearson lower bound TPR_lo and upper bound FPR_hi, each at confidence 1 − α/2 (the
   two-sided exact interval at 1 − α), both hold together with probability ≥ 1 − α, and then
   ε ≥ max(log(TPR_lo / FPR_hi), log((1 − FPR_hi) / (1 − TPR_lo))) at confidence 1 − α.
3. :func:`law`: the lower bound may never exceed the guarantee; without one, the lower bound is
   the leak an attacker can demonstrate.

What the bound proves: with probability ≥ 95 % over the trials' randomness, the mechanism as run
is not ε-DP for any ε below it. Not that it is private up to it: a weak attacker, few trials or a
canary the model will not repeat all give small bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import binomtest

from ctxleak.errors import ConfigError

#: The confidence of the lower bound, by default.
CONFIDENCE = 0.95

#: The law's outcomes.
HOLDS, VIOLATED, NO_GUARANTEE = "holds", "violated", "no guarantee"


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval of a binomial proportion, k of n, at
    ``confidence``; (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def eps_lower_bound(tp: int, n_in: int, fp: int, n_out: int,
                    confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The ε lower bound of one test, true positives ``tp`` of ``n_in`` trials with the target
    planted and false positives ``fp`` of ``n_out`` without (module docstring, step 2).

    Returns ``eps_lower`` (≥ 0, in nats), which inequality gave it (``from``: ``"TPR/FPR"`` or
    ``"TNR/FNR"``, None at 0), both rates and their two-sided exact intervals at
    1 − α (each interval's one side used at 1 − α/2)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), not {confidence}", param="confidence")
    alpha = 1.0 - confidence
    tpr_ci = clopper_pearson(tp, n_in, 1.0 - alpha)
    fpr_ci = clopper_pearson(fp, n_out, 1.0 - alpha)
    tpr_lo, fpr_hi = tpr_ci[0], fpr_ci[1]
    candidates = {"TPR/FPR": _log_ratio(tpr_lo, fpr_hi),
                  "TNR/FNR": _log_ratio(1.0 - fpr_hi, 1.0 - tpr_lo)}
    side = max(candidates, key=lambda k: candidates[k])
    eps = max(0.0, candidates[side])
    return {"eps_lower": eps, "from": side if eps > 0 else None, "confidence": confidence,
            "tp": int(tp), "n_in": int(n_in), "fp": int(fp), "n_out": int(n_out),
            "tpr": tp / n_in if n_in else None, "fpr": fp / n_out if n_out else None,
            "tpr_ci": list(tpr_ci), "fpr_ci": list(fpr_ci)}


def _log_ratio(num: float, den: float) -> float:
    if num <= 0:
        return 0.0
    return math.inf if den <= 0 else math.log(num / den)


def _counts(scores: np.ndarray, coins: np.ndarray, threshold: float) -> tuple[int, int, int, int]:
    guess = scores >= threshold
    return (int((guess & coins).sum()), int(coins.sum()), int((guess & ~coins).sum()),
            int((~coins).sum()))


def choose_threshold(scores: Sequence[float], coins: Sequence[bool],
                     confidence: float = CONFIDENCE) -> float:
    """The threshold t (``score ≥ t``: guess the target was planted) with the largest ε lower
    bound on these trials, ties broken by the larger TPR − FPR, then the smaller t; every
    distinct score is a candidate."""
    s, c = np.asarray(scores, dtype=np.float64), np.asarray(coins, dtype=bool)
    best: tuple[float, float, float] | None = None
    chosen = math.inf
    for t in sorted(set(s.tolist())):
        tp, n_in, fp, n_out = _counts(s, c, t)
        eps = eps_lower_bound(tp, n_in, fp, n_out, confidence)["eps_lower"]
        gap = (tp / n_in if n_in else 0.0) - (fp / n_out if n_out else 0.0)
        rank = (eps, gap, -t)
        if best is None or rank > best:
            best, chosen = rank, t
    return chosen


def audit_scores(scores: Sequence[float], coins: Sequence[bool], *, seed: int = 0,
                 confidence: float = CONFIDENCE, threshold: float | None = None
                 ) -> dict[str, Any]:
    """The ε lower bound of the attack whose ``scores`` (one per trial) try to tell the
    ``coins`` (True: the target was planted).

    ``threshold`` None: a seeded random half of the trials (``split_seed``; half of those with
    the target and half of those without) chooses it (:func:`choose_threshold`) and the other
    half measures the rates; a number fixed before the
    trials were seen: every trial measures. Returns :func:`eps_lower_bound`'s fields with the
    ``threshold``, how it was chosen and which trials measured (``measured``, their indices)."""
    s, c = np.asarray(scores, dtype=np.float64), np.asarray(coins, dtype=bool)
    if s.shape != c.shape or s.ndim != 1:
        raise ConfigError(f"scores and coins must be two lists of one length, not {s.shape} and "
                          f"{c.shape}", param="scores")
    if threshold is None:  # a seeded half of the heads and half of the tails choose
        rng = np.random.default_rng(seed)
        heads, tails = rng.permutation(np.flatnonzero(c)), rng.permutation(np.flatnonzero(~c))
        select = np.sort(np.concatenate([heads[:len(heads) // 2], tails[:len(tails) // 2]]))
        measure = np.sort(np.concatenate([heads[len(heads) // 2:], tails[len(tails) // 2:]]))
        t = choose_threshold(s[select].tolist(), c[select].tolist(), confidence)
        how = f"chosen on {len(select)} trials, measured on the other {len(measure)}"
    else:
        measure, t = np.arange(len(s)), float(threshold)
        how = f"fixed in advance, measured on all {len(s)} trials"
    out = eps_lower_bound(*_counts(s[measure], c[measure], t), confidence=confidence)
    return {**out, "threshold": None if math.isinf(t) else t, "threshold_choice": how,
            "split_seed": seed if threshold is None else None,
            "measured": [int(i) for i in measure]}


def law(lower: float, upper: float | None) -> str:
    """``holds`` when the lower bound is at most the guarantee, ``violated`` when it exceeds it
    (the mechanism is not as private as it claims, with the bound's confidence), ``no
    guarantee`` for an unbounded setting."""
    if upper is None:
        return NO_GUARANTEE
    return HOLDS if lower <= upper else VIOLATED


__all__ = ["CONFIDENCE", "HOLDS", "NO_GUARANTEE", "VIOLATED", "audit_scores", "choose_threshold",
           "clopper_pearson", "eps_lower_bound", "law"]
