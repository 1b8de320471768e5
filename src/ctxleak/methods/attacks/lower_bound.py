"""An attack's empirical ε lower bound, and the law that holds it under the guarantee.

DP is audited by what an attacker can actually distinguish ("Auditing Differentially Private
Machine Learning: How Private is Private SGD?", Jagielski et al. 2020; "Adversary Instantiation:
Lower Bounds for Differentially Private Machine Learning", Nasr et al. 2021); the canary audit
and the membership attacks' ROC read their trials' scores so:

1. :func:`audit_scores` picks the threshold ("score ≥ t means the target was planted") by one of
   two rules, both of which pay for the look: a threshold picked on the trials it is measured on,
   uncorrected, inflates the bound.

   - ``split-half``: the threshold is chosen on one seeded half of the trials (half of each side
     of the coin) and the true and false positives are counted on the other half;
   - ``all-trials``: every trial measures, at every one of ``m`` candidate thresholds fixed from
     the pooled scores without their labels (:func:`candidate_thresholds`: the distinct scores
     above the lowest, at most :data:`MAX_CANDIDATES` of them, quantiles where there are more),
     each bound at confidence 1 − α/m, the largest kept (Bonferroni over the candidates: all m
     hold together with probability ≥ 1 − α, so their maximum does too).

   ``auto`` (the default) takes the rule whose perfect attack shows more
   (:func:`eps_max_showable`), which depends on the counts and ``m`` alone, never on how the
   scores sit against the labels: the rule is chosen before looking, so no further correction is
   owed. A threshold fixed in advance measures on all trials at 1 − α (``fixed``).
2. :func:`eps_lower_bound`: for pure ε-DP every test has TPR ≤ e^ε·FPR and
   1 − FPR ≤ e^ε·(1 − TPR) (Jagielski et al. 2020, Thm 1 with δ = 0). With a one-sided
   Clopper–Pearson lower bound TPR_lo and upper bound FPR_hi, each at confidence 1 − α/2 (the
   two-sided exact interval at 1 − α), both hold together with probability ≥ 1 − α, and then
   ε ≥ max(log(TPR_lo / FPR_hi), log((1 − FPR_hi) / (1 − TPR_lo))) at confidence 1 − α.
3. :func:`law`: the lower bound may never exceed the guarantee; without one, the lower bound is
   the leak an attacker can demonstrate.

What the bound proves: with probability ≥ 95 % over the trials' randomness, the mechanism as run
is not ε-DP for any ε below it. Not that it is private up to it: a weak attacker, few trials or a
canary the model will not repeat all give small bounds. How small is said by the bound's power:

- :func:`eps_max_showable`: the bound a perfect attack (every trial with the target scored above
  every trial without) would get with the same counts, confidence and rule: no attack on these
  trials can show more, and with too few (15 documents) it is 0;
- :func:`auc_min_detectable`: the smallest AUC − ½ the one-sided rank test at the same
  confidence calls significant, from the Mann–Whitney statistic's null variance
  (n₁ + n₀ + 1) / (12·n₁·n₀) (Hanley and McNeil 1982 at AUC = ½): z₁₋α·√ of it;
- :func:`documents_needed`: the fewest trials whose expected counts at given rates show a
  bound above a target, by a scan (the criterion is not monotone in the trials: rounding the
  expected counts can make n + 1 trials show less than n);
- :func:`power_verdict`: the sentence that opens a report: what was shown and the most any
  attack could have shown.

The trials are independent draws (a datastore's documents are treated as independent trials);
where the best of k attacks is reported, each is bounded at 1 − α/k so that the maximum holds at
1 − α jointly (:func:`joint_confidence`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import beta, norm

from ctxleak.errors import ConfigError

#: The confidence of the lower bound, by default.
CONFIDENCE = 0.95

#: The law's outcomes.
HOLDS, VIOLATED, NO_GUARANTEE = "holds", "violated", "no guarantee"

#: The threshold rules (module docstring, step 1); ``auto`` picks one of the first two.
SPLIT_HALF, ALL_TRIALS, FIXED, AUTO = "split-half", "all-trials", "fixed", "auto"
RULES = (AUTO, SPLIT_HALF, ALL_TRIALS)
#: The most candidate thresholds the all-trials rule tries (each costs a Bonferroni share).
MAX_CANDIDATES = 20
#: The largest number of trials :func:`documents_needed` scans.
MAX_DOCUMENTS = 100_000


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval of a binomial proportion, k of n, at
    ``confidence``; (0, 1) when n = 0. Its ends are Beta quantiles (the closed form of
    ``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``, which finds them by root
    search: the same to about 1e-13, many times faster)."""
    if n == 0:
        return 0.0, 1.0
    lo, hi = _cp_ends(np.asarray([int(k)]), np.asarray([int(n)]), confidence)
    return float(lo[0]), float(hi[0])


def eps_lower_bound(tp: int, n_in: int, fp: int, n_out: int,
                    confidence: float = CONFIDENCE, delta: float = 0.0) -> dict[str, Any]:
    """The ε lower bound of one test, true positives ``tp`` of ``n_in`` trials with the target
    planted and false positives ``fp`` of ``n_out`` without (module docstring, step 2).

    ``delta``: the δ of the (ε, δ) claim the bound is set against: every test of an (ε, δ)-DP
    mechanism has TPR ≤ e^ε·FPR + δ and 1 − FPR ≤ e^ε·(1 − TPR) + δ (Jagielski et al. 2020,
    Thm 1), so δ is taken off both numerators; 0 (the default): the pure-ε bound.

    Returns ``eps_lower`` (≥ 0, in nats), which inequality gave it (``from``: ``"TPR/FPR"`` or
    ``"TNR/FNR"``, None at 0), both rates and their two-sided exact intervals at
    1 − α (each interval's one side used at 1 − α/2)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), not {confidence}", param="confidence")
    if not 0 <= delta < 1:
        raise ConfigError(f"delta must be in [0, 1), not {delta}", param="delta")
    alpha = 1.0 - confidence
    tpr_ci = clopper_pearson(tp, n_in, 1.0 - alpha)
    fpr_ci = clopper_pearson(fp, n_out, 1.0 - alpha)
    tpr_lo, fpr_hi = tpr_ci[0], fpr_ci[1]
    candidates = {"TPR/FPR": _log_ratio(tpr_lo - delta, fpr_hi),
                  "TNR/FNR": _log_ratio(1.0 - fpr_hi - delta, 1.0 - tpr_lo)}
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
        rank = _rank(eps_lower_bound(*_counts(s, c, t), confidence), t)
        if best is None or rank > best:
            best, chosen = rank, t
    return chosen


def candidate_thresholds(scores: Sequence[float], most: int = MAX_CANDIDATES) -> list[float]:
    """The all-trials rule's thresholds, from the pooled scores alone (never their labels): the
    distinct scores above the lowest (the lowest guesses every trial planted and shows nothing),
    or, where there are more than ``most``, ``most`` of them at evenly spaced quantiles."""
    values = np.unique(np.asarray(scores, dtype=np.float64))[1:]
    if len(values) > most:
        at = np.unique(np.round(np.linspace(0, len(values) - 1, most)).astype(int))
        values = values[at]
    return [float(v) for v in values]


def _measured_counts(n_in: int, n_out: int, rule: str) -> tuple[int, int]:
    """The trials with and without the target that measure under ``rule``: all of them, or the
    half that does not choose (the larger half of an odd side, as :func:`audit_scores` splits)."""
    if rule == SPLIT_HALF:
        return n_in - n_in // 2, n_out - n_out // 2
    return n_in, n_out


def _bound_confidence(confidence: float, rule: str, candidates: int) -> float:
    """The confidence of each threshold's bound: 1 − α/m over the all-trials rule's m
    candidates, 1 − α otherwise."""
    if rule == ALL_TRIALS:
        return 1.0 - (1.0 - confidence) / max(1, candidates)
    return confidence


def eps_max_showable(n_in: int, n_out: int, confidence: float = CONFIDENCE, *,
                     rule: str = SPLIT_HALF, candidates: int = 1) -> float:
    """The ε lower bound (nats) of a perfect attack with these counts: every measured trial
    with the target guessed planted and none without, under ``rule`` (``split-half``: half of
    each side measures, at 1 − α; ``all-trials`` or ``fixed``: all, at 1 − α/``candidates``
    for ``all-trials``). No attack on these trials can show more."""
    if rule not in (SPLIT_HALF, ALL_TRIALS, FIXED):
        raise ConfigError(f"rule must be {SPLIT_HALF!r}, {ALL_TRIALS!r} or {FIXED!r}, not "
                          f"{rule!r}", param="rule")
    m_in, m_out = _measured_counts(n_in, n_out, rule)
    return float(eps_lower_bound(m_in, m_in, 0, m_out,
                                 _bound_confidence(confidence, rule, candidates))["eps_lower"])


def choose_rule(n_in: int, n_out: int, confidence: float = CONFIDENCE,
                candidates: int = MAX_CANDIDATES) -> str:
    """``split-half`` or ``all-trials``, whichever lets a perfect attack show more with these
    counts (:func:`eps_max_showable`; ``all-trials`` on a tie): decided from the counts and the
    number of candidates alone, before any score is read against its label."""
    split = eps_max_showable(n_in, n_out, confidence, rule=SPLIT_HALF)
    every = eps_max_showable(n_in, n_out, confidence, rule=ALL_TRIALS,
                             candidates=max(1, candidates))
    return SPLIT_HALF if split > every else ALL_TRIALS


def auc_min_detectable(n_in: int, n_out: int, confidence: float = CONFIDENCE) -> float | None:
    """The smallest AUC − ½ the one-sided rank (Mann–Whitney) test at ``confidence`` calls
    significant with ``n_in`` members and ``n_out`` non-members, by the normal approximation:
    z_confidence · √((n_in + n_out + 1) / (12·n_in·n_out)), the null standard deviation of the
    AUC (Hanley and McNeil 1982 at AUC = ½; DeLong's variance is the same under the null); an
    AUC this far from ½ is detected half the time. None without both sides."""
    if n_in < 1 or n_out < 1:
        return None
    sd = math.sqrt((n_in + n_out + 1) / (12.0 * n_in * n_out))
    return float(norm.ppf(confidence) * sd)


def joint_confidence(confidence: float, k: int) -> float:
    """Each of ``k`` bounds' confidence so that their maximum holds at ``confidence``
    (Bonferroni): 1 − (1 − confidence)/k."""
    return 1.0 - (1.0 - confidence) / max(1, k)


def audit_scores(scores: Sequence[float], coins: Sequence[bool], *, seed: int = 0,
                 confidence: float = CONFIDENCE, threshold: float | None = None,
                 rule: str = AUTO, candidates: int = MAX_CANDIDATES) -> dict[str, Any]:
    """The ε lower bound of the attack whose ``scores`` (one per trial) try to tell the
    ``coins`` (True: the target was planted), at ``confidence``.

    ``threshold`` a number fixed before the trials were seen: every trial measures
    (``threshold_rule`` ``fixed``). Otherwise ``rule`` (module docstring, step 1):
    ``split-half`` (a seeded random half, ``split_seed``, of those with the target and of those
    without chooses it, :func:`choose_threshold`, the other half measures), ``all-trials``
    (every trial measures at each of at most ``candidates`` thresholds,
    :func:`candidate_thresholds`, each at 1 − α/m, the largest bound kept) or ``auto``
    (:func:`choose_rule`). Returns :func:`eps_lower_bound`'s fields (its ``confidence`` the
    one the bound holds at; ``bound_confidence`` the one each threshold's intervals are
    computed at) with the ``threshold``, ``threshold_rule``, ``candidates`` (m), how it was
    chosen, which trials measured (``measured``, their indices) and ``eps_max_showable``."""
    s, c = np.asarray(scores, dtype=np.float64), np.asarray(coins, dtype=bool)
    if s.shape != c.shape or s.ndim != 1:
        raise ConfigError(f"scores and coins must be two lists of one length, not {s.shape} and "
                          f"{c.shape}", param="scores")
    if rule not in RULES:
        raise ConfigError(f"rule must be one of {', '.join(RULES)}, not {rule!r}", param="rule")
    if candidates < 1:
        raise ConfigError(f"candidates must be at least 1, not {candidates}", param="candidates")
    n_in, n_out = int(c.sum()), int((~c).sum())
    grid = candidate_thresholds(s.tolist(), candidates)
    if threshold is not None:
        used, m = FIXED, 1
    else:
        used = rule if rule != AUTO else choose_rule(n_in, n_out, confidence, max(1, len(grid)))
        m = max(1, len(grid)) if used == ALL_TRIALS else 1
    level = _bound_confidence(confidence, used, m)
    if used == SPLIT_HALF:  # a seeded half of the heads and half of the tails choose
        rng = np.random.default_rng(seed)
        heads, tails = rng.permutation(np.flatnonzero(c)), rng.permutation(np.flatnonzero(~c))
        select = np.sort(np.concatenate([heads[:len(heads) // 2], tails[:len(tails) // 2]]))
        measure = np.sort(np.concatenate([heads[len(heads) // 2:], tails[len(tails) // 2:]]))
        t = choose_threshold(s[select].tolist(), c[select].tolist(), confidence)
        how = f"chosen on {len(select)} trials, measured on the other {len(measure)}"
        out = eps_lower_bound(*_counts(s[measure], c[measure], t), confidence=level)
    elif used == ALL_TRIALS:
        measure, t = np.arange(len(s)), math.inf
        out = eps_lower_bound(*_counts(s, c, t), confidence=level)
        for cand in grid:  # the largest bound; ties to the larger TPR − FPR, then the smaller t
            got = eps_lower_bound(*_counts(s, c, cand), confidence=level)
            if _rank(got, cand) > _rank(out, t):
                out, t = got, cand
        how = (f"the best of {m} candidate threshold(s) on all {len(s)} trials, each bound at "
               f"{100 * level:.4g} % (Bonferroni over the candidates)")
    else:
        measure, t = np.arange(len(s)), float(threshold)  # type: ignore[arg-type]
        how = f"fixed in advance, measured on all {len(s)} trials"
        out = eps_lower_bound(*_counts(s, c, t), confidence=level)
    return {**out, "confidence": confidence, "bound_confidence": level,
            "threshold": None if math.isinf(t) else t, "threshold_rule": used,
            "candidates": m, "threshold_choice": how,
            "split_seed": seed if used == SPLIT_HALF else None,
            "measured": [int(i) for i in measure],
            "eps_max_showable": eps_max_showable(n_in, n_out, confidence, rule=used,
                                                 candidates=m)}


def _rank(out: dict[str, Any], t: float) -> tuple[float, float, float]:
    gap = (out["tpr"] or 0.0) - (out["fpr"] or 0.0)
    return out["eps_lower"], gap, -t


def _cp_ends(k: np.ndarray, n: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact two-sided interval's ends at ``confidence``, element by element (the Beta
    quantiles :func:`clopper_pearson` computes one at a time)."""
    a = (1.0 - confidence) / 2
    with np.errstate(all="ignore"):
        lo = np.where(k > 0, beta.ppf(a, np.maximum(k, 1), n - k + 1), 0.0)
        hi = np.where(k < n, beta.ppf(1 - a, k + 1, np.maximum(n - k, 1)), 1.0)
    return lo, hi


def documents_needed(tpr: float, fpr: float, confidence: float = CONFIDENCE, *,
                     rule: str = SPLIT_HALF, candidates: int = 1, target: float = 0.0,
                     most: int = MAX_DOCUMENTS) -> int | None:
    """The fewest trials n (half with the target: ⌈n/2⌉ with, ⌊n/2⌋ without) whose expected
    counts at these rates (round(tpr·measured with), round(fpr·measured without)) give a bound
    above ``target`` under ``rule`` (as :func:`eps_max_showable`); None when the rates cannot
    (TPR ≤ FPR) or need more than ``most``. Every n from 2 up is tried, in order: the
    criterion is not monotone (rounding), so the first n that shows it is the fewest."""
    if tpr <= fpr:
        return None
    level = _bound_confidence(confidence, rule, candidates)
    block = 4096
    for first in range(2, most + 1, block):
        n = np.arange(first, min(most, first + block - 1) + 1)
        n_in, n_out = (n + 1) // 2, n // 2
        if rule == SPLIT_HALF:
            n_in, n_out = n_in - n_in // 2, n_out - n_out // 2
        tp, fp = np.round(tpr * n_in), np.round(fpr * n_out)
        tpr_lo, _ = _cp_ends(tp, n_in, level)
        _, fpr_hi = _cp_ends(fp, n_out, level)
        with np.errstate(all="ignore"):
            one = np.where(tpr_lo > 0, np.log(tpr_lo / fpr_hi), 0.0)
            other = np.where(1 - fpr_hi > 0, np.log((1 - fpr_hi) / (1 - tpr_lo)), 0.0)
        shown = np.flatnonzero(np.maximum(one, other) > target)
        if len(shown):
            return int(n[shown[0]])
    return None


def power_verdict(eps: float, eps_max: float, n_in: int, n_out: int, confidence: float, *,
                  attacks: int = 1, best: str | None = None, who: tuple[str, str] = (
                      "members", "non-members")) -> str:
    """The sentence that opens a report: the bound shown (or that none was, and what a bound of
    0 does not mean), at which confidence (joint over ``attacks``), and the most any attack
    could show with these counts (:func:`eps_max_showable`)."""
    conf = f"{100 * confidence:.0f} %"
    joint = f"joint confidence {conf} over {attacks} attacks" if attacks > 1 else \
        f"{conf} confidence"
    counts = f"{n_in} {who[0]} and {n_out} {who[1]}"
    if eps > 0:
        by = f", by the {best} attack" if best else ""
        return (f"ε ≥ {eps:.2g} nats shown ({joint}{by}); with {counts} no attack could show "
                f"more than {eps_max:.2g} nats.")
    head = ("Not shown: a bound of 0 means the attack did not show a leak, not that there is "
            f"none ({joint})")
    if eps_max <= 0:
        return f"{head}; with {n_in + n_out} documents ({counts}) no attack could show ε > 0."
    return f"{head}; with {counts} a perfect attack could have shown ε ≥ {eps_max:.2g} nats."


def law(lower: float, upper: float | None) -> str:
    """``holds`` when the lower bound is at most the guarantee, ``violated`` when it exceeds it
    (the mechanism is not as private as it claims, with the bound's confidence), ``no
    guarantee`` for an unbounded setting."""
    if upper is None:
        return NO_GUARANTEE
    return HOLDS if lower <= upper else VIOLATED


__all__ = ["ALL_TRIALS", "AUTO", "CONFIDENCE", "FIXED", "HOLDS", "MAX_CANDIDATES", "MAX_DOCUMENTS",
           "NO_GUARANTEE", "RULES", "SPLIT_HALF", "VIOLATED", "auc_min_detectable", "audit_scores",
           "candidate_thresholds", "choose_rule", "choose_threshold", "clopper_pearson",
           "documents_needed", "eps_lower_bound", "eps_max_showable", "joint_confidence", "law",
           "power_verdict"]
