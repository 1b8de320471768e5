"""How well an attack's scores tell members from non-members: the ROC, its area, the true
positive rate at a low false positive rate, and the ε an attacker demonstrates.

A membership attack ("Is My Data in Your Retrieval Database?", Anderson et al. 2024;
"Mask-based Membership Inference Attacks for Retrieval-Augmented Generation", Liu et al. 2025;
"Riddle Me This! Stealthy Membership Inference for Retrieval-Augmented Generation", Naseh et al.
2025) gives each document a score; "score ≥ t" guesses member. Every number here is computed
from the scores and the true labels alone:

- :func:`roc_points`: (FPR, TPR) at every distinct score used as the threshold, from (0, 0)
  (nothing guessed member) to (1, 1);
- :func:`auc`: the area under that curve, as the Mann–Whitney statistic: the probability that a
  random member scores above a random non-member, a tie counted 1/2 (0.5: no better than a
  coin; 1: every member above every non-member);
- :func:`auc_interval`: its interval by a seeded stratified bootstrap (members and non-members
  resampled apart, the percentile interval): not exact, and narrower than it should be with
  few documents; the summary names the method and the number of resamples; beside it
  :func:`auc_test`, the one-sided Mann–Whitney test of AUC > ½, exact for few documents
  without ties;
- :func:`tpr_at_fpr`: the largest TPR whose threshold keeps the FPR at most 1 % or 10 %, as
  "Membership Inference Attacks From First Principles" (Carlini et al. 2022) recommends
  reading an attack, each rate with its exact Clopper–Pearson interval. The threshold is read
  off the same scores it is measured on (as the papers report it), so the point is optimistic;
  with fewer than 1/FPR non-members the only FPR at most that target is 0 (``resolved`` False);
- :func:`roc_summary` adds the ε lower bound at 95 %
  (:func:`ctxleak.methods.attacks.lower_bound.audit_scores`: Clopper–Pearson with a union bound,
  the threshold rule chosen from the counts before looking: every document measuring at each of
  at most 20 candidate thresholds with a Bonferroni share of α, or the threshold chosen on one
  seeded half of each side and the rates measured on the other), the canary audit's bound:
  members are its heads, non-members its tails; and its power: ``eps_max_showable`` (what a
  perfect attack would show with these counts) and ``auc_min_detectable`` (the smallest
  AUC − ½ the rank test detects at the bound's confidence).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu, rankdata

from ctxleak.errors import InputError
from ctxleak.methods.attacks.lower_bound import (
    AUTO,
    CONFIDENCE,
    auc_min_detectable,
    audit_scores,
    clopper_pearson,
)

#: Scores (one per document) and labels (True: member): lists or one-dimensional arrays.
Scores = Sequence[float] | np.ndarray
Labels = Sequence[bool] | np.ndarray

#: The false positive rates the summary reads the TPR at.
FPR_TARGETS = (0.01, 0.1)
#: Bootstrap resamples of the AUC interval, by default.
RESAMPLES = 2000


def _arrays(scores: Scores, labels: Labels) -> tuple[np.ndarray, np.ndarray]:
    """Scores (float64) and labels (True: member), checked: one length, finite scores, and at
    least one member and one non-member."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if s.ndim != 1 or s.shape != y.shape:
        raise InputError(f"scores and labels must be two lists of one length, not {s.shape} "
                         f"and {y.shape}", field="scores")
    if not np.all(np.isfinite(s)):
        raise InputError("every score must be a finite number", field="scores")
    if not y.any() or y.all():
        raise InputError(f"an ROC needs members and non-members: got {int(y.sum())} member(s) "
                         f"and {int((~y).sum())} non-member(s)", field="labels")
    return s, y


def roc_points(scores: Scores, labels: Labels) -> list[dict[str, Any]]:
    """The ROC: for each threshold t (None: guess no one a member, then every distinct score,
    highest first), ``tp`` and ``fp`` (documents with score ≥ t among members and
    non-members) and the rates ``tpr`` = tp / members, ``fpr`` = fp / non-members."""
    s, y = _arrays(scores, labels)
    n_in, n_out = int(y.sum()), int((~y).sum())
    order = np.argsort(-s, kind="stable")
    tps, fps = np.cumsum(y[order]), np.cumsum(~y[order])
    # the last position of each distinct score: every document scoring ≥ it is counted
    last = np.flatnonzero(np.append(np.diff(s[order]) != 0, True))
    points = [{"threshold": None, "tp": 0, "fp": 0, "tpr": 0.0, "fpr": 0.0}]
    for i in last:
        tp, fp = int(tps[i]), int(fps[i])
        points.append({"threshold": float(s[order][i]), "tp": tp, "fp": fp, "tpr": tp / n_in,
                       "fpr": fp / n_out})
    return points


def _mann_whitney(s: np.ndarray, y: np.ndarray) -> float:
    """(rank sum of the members − n₁(n₁+1)/2) / (n₁·n₀), average ranks for ties."""
    ranks = rankdata(s)
    n_in = int(y.sum())
    n_out = len(s) - n_in
    return float((ranks[y].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out))


def auc(scores: Scores, labels: Labels) -> float:
    """The area under the ROC: P(member's score > non-member's) + ½ P(equal), over all pairs."""
    return _mann_whitney(*_arrays(scores, labels))


def auc_interval(scores: Scores, labels: Labels, *,
                 confidence: float = CONFIDENCE, seed: int = 0,
                 resamples: int = RESAMPLES) -> dict[str, Any]:
    """The AUC's interval at ``confidence``: ``resamples`` stratified bootstrap resamples (the
    members drawn with replacement from the members, the non-members from the non-members,
    from ``seed``), the percentile interval. Returns ``low``, ``high`` and ``method``."""
    s, y = _arrays(scores, labels)
    if resamples < 100:
        raise InputError(f"resamples must be at least 100, not {resamples}", param="resamples")
    rng = np.random.default_rng(seed)
    pos, neg = s[y], s[~y]
    labels_b = np.concatenate([np.ones(len(pos), bool), np.zeros(len(neg), bool)])
    values = np.empty(resamples)
    for b in range(resamples):
        sample = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
        values[b] = _mann_whitney(sample, labels_b)
    alpha = 1.0 - confidence
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return {"low": float(low), "high": float(high), "confidence": confidence,
            "method": f"stratified bootstrap, {resamples} resamples, percentile interval "
                      f"(seed {seed}); not exact"}


#: The most member × non-member pairs for which the test's p-value is computed exactly.
EXACT_PAIRS = 2500


def auc_test(scores: Scores, labels: Labels) -> dict[str, Any]:
    """The one-sided Mann–Whitney test of "members score higher than non-members" (AUC > ½):
    its ``p_value`` and ``method``, exact (the permutation distribution of the rank sum) when
    no two scores tie and there are at most :data:`EXACT_PAIRS` pairs, else the normal
    approximation with the tie correction."""
    s, y = _arrays(scores, labels)
    pos, neg = s[y], s[~y]
    exact = len(set(s.tolist())) == len(s) and len(pos) * len(neg) <= EXACT_PAIRS
    if len(set(s.tolist())) == 1:  # every score equal: no evidence at all
        return {"p_value": 1.0, "method": "every score equal", "alternative": "AUC > 0.5"}
    got = mannwhitneyu(pos, neg, alternative="greater", method="exact" if exact else
                       "asymptotic")
    return {"p_value": float(got.pvalue), "alternative": "AUC > 0.5",
            "method": "exact Mann-Whitney" if exact else
                      "Mann-Whitney, normal approximation with tie correction"}


def tpr_at_fpr(scores: Scores, labels: Labels, fpr: float, *,
               confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The largest TPR among the ROC's thresholds whose FPR is at most ``fpr``: the
    ``threshold`` (None: no threshold keeps the FPR that low but guessing no one), the counts,
    both rates with their exact two-sided Clopper–Pearson intervals at ``confidence``, and
    ``resolved`` (False when there are fewer than 1/``fpr`` non-members: then only an FPR of 0
    is at most the target)."""
    if not 0 < fpr < 1:
        raise InputError(f"fpr must be in (0, 1), not {fpr}", param="fpr")
    s, y = _arrays(scores, labels)
    points = roc_points(s, y)
    n_in, n_out = int(y.sum()), int((~y).sum())
    best = max((p for p in points if p["fpr"] <= fpr), key=lambda p: (p["tpr"], -p["fpr"]))
    return {"fpr_target": fpr, "threshold": best["threshold"], "tp": best["tp"], "n_in": n_in,
            "fp": best["fp"], "n_out": n_out, "tpr": best["tpr"], "fpr": best["fpr"],
            "tpr_ci": list(clopper_pearson(best["tp"], n_in, confidence)),
            "fpr_ci": list(clopper_pearson(best["fp"], n_out, confidence)),
            "confidence": confidence, "resolved": n_out * fpr >= 1}


def roc_summary(scores: Scores, labels: Labels, *, seed: int = 0,
                confidence: float = CONFIDENCE, fprs: Sequence[float] = FPR_TARGETS,
                resamples: int = RESAMPLES, eps_confidence: float | None = None,
                rule: str = AUTO) -> dict[str, Any]:
    """One attack's numbers: ``auc`` with ``auc_ci`` (:func:`auc_interval`) and ``auc_test``
    (:func:`auc_test`), the ``roc``
    points, ``tpr_at_fpr`` (one entry per target in ``fprs``), and ``eps`` (the ε lower bound
    in nats at ``eps_confidence``, default ``confidence``, by the threshold ``rule``:
    :func:`ctxleak.methods.attacks.lower_bound.audit_scores`, with ``eps_max_showable``).
    ``n_members``, ``n_non_members``; ``auc_min_detectable``: the smallest AUC − ½ the one-sided
    rank test detects at ``eps_confidence``
    (:func:`ctxleak.methods.attacks.lower_bound.auc_min_detectable`)."""
    s, y = _arrays(scores, labels)
    level = confidence if eps_confidence is None else eps_confidence
    eps = audit_scores(s.tolist(), y.tolist(), seed=seed, confidence=level, rule=rule)
    n_in, n_out = int(y.sum()), int((~y).sum())
    return {"n_members": n_in, "n_non_members": n_out,
            "auc_min_detectable": auc_min_detectable(n_in, n_out, level),
            "auc": _mann_whitney(s, y),
            "auc_ci": auc_interval(s, y, confidence=confidence, seed=seed, resamples=resamples),
            "auc_test": auc_test(s, y),
            "tpr_at_fpr": [tpr_at_fpr(s, y, f, confidence=confidence) for f in fprs],
            "roc": roc_points(s, y), "eps": eps}


def covers(interval: dict[str, Any], value: float) -> bool:
    """Whether ``value`` lies in ``interval`` (``low`` ≤ value ≤ ``high``)."""
    return bool(interval["low"] <= value <= interval["high"]) and not math.isnan(value)


__all__ = ["EXACT_PAIRS", "FPR_TARGETS", "RESAMPLES", "auc", "auc_interval", "auc_test",
           "covers", "roc_points", "roc_summary", "tpr_at_fpr"]
