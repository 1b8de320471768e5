"""A canary audit of Context Influence Decoding: an attack's empirical ε lower bound beside the
guarantee.

Bounded CID ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
App. B, Alg. 1, Thm B.1) promises ε per released token; a response of L released tokens is
(L·ε)-DP by basic composition. This module measures what an attacker can actually distinguish,
as differentially private training is audited with canaries ("Privacy Auditing with One (1)
Training Run", Steinke, Nasr and Jagielski 2023; the others in :mod:`.lower_bound`):

1. :func:`plant_canaries`: each trial takes a document and two random canaries (``digits``
   random digits, an account number, drawn from the recorded seed): the *target* and the
   *other*. A recorded coin decides which is planted (half the coins heads, shuffled):
   heads, the document holds the target; tails, the same document holds the other canary. The
   two contexts are neighbours by replacement of one sentence. (Bounded CID keeps every
   context's next-token distribution within ε/2 of the no-context one, so any two contexts,
   these included, are ε apart per token.)
2. The response is drawn under the setting (λ, T, bounded ε) by CID, all trials batched.
3. The attacker scores each response alone, never seeing the coin:
   :func:`attack_score` counts the target canary's characters the response repeats, in any
   order (so that a mechanism cannot hide a leak by shuffling it).
4. The statistics (:mod:`ctxleak.methods.attacks.lower_bound`, which says what the bound proves
   and what it does not): :func:`audit_scores` picks the threshold on one seeded half of the
   trials and measures on the other, the Clopper–Pearson ε lower bound at 95 % confidence, and
   :func:`law`: the lower bound may never exceed the guarantee (:func:`guarantee`: the largest
   composed ε of the trials' responses, since it must hold for every output the test counted).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.lower_bound import (
    CONFIDENCE,
    SPLIT_HALF,
    VIOLATED,
    audit_scores,
    eps_lower_bound,
    law,
)
from ctxleak.methods.influence.data import InfluenceExample
from ctxleak.mitigations.prompts import PromptParts, document_parts

#: The sentence that plants a canary in a document, and the question that asks for it.
CANARY_SENTENCE = "Account number {canary}."
CANARY_QUERY = "What is the account number? Answer with the digits only."


@dataclass(frozen=True)
class CanaryTrial:
    """One trial: the document (by its example id), the target canary the attacker tests for,
    the other canary of the neighbouring context, and the coin (``included``: the target is
    planted; otherwise the other canary is)."""

    trial: int
    document_id: str | int
    document: str
    canary: str
    other: str
    included: bool
    query: str = CANARY_QUERY

    @property
    def key(self) -> str:
        return f"trial-{self.trial}"

    @property
    def planted(self) -> str:
        """The canary this trial's context holds."""
        return self.canary if self.included else self.other

    @property
    def context(self) -> str:
        """The planted canary's sentence, then the document (a 135M model repeats a number at the
        start of its context more often than one at the end)."""
        return f"{CANARY_SENTENCE.format(canary=self.planted)} {self.document}".strip()

    def parts(self, lm: LanguageModel, reserve: int = 0) -> PromptParts:
        """The trial's question-answering prompt (ctxleak's template, Sec. 4) split around its
        context, cut to the model's window minus ``reserve`` new tokens."""
        return document_parts(lm, (self.context,), self.query, reserve=reserve)[0]


def plant_canaries(examples: Sequence[InfluenceExample], trials: int, seed: int,
                   digits: int = 6) -> list[CanaryTrial]:
    """``trials`` trials over ``examples``' documents (in turn), each with a target and another
    canary of ``digits`` random digits and a coin, all drawn from ``seed`` (the same seed gives
    the same trials). Half the coins are heads, in a random order."""
    if trials < 2:
        raise ConfigError(f"trials must be >= 2 (half choose the threshold, half measure), "
                          f"not {trials}", param="trials")
    if not 3 <= digits <= 18:
        raise ConfigError(f"digits must be between 3 and 18, not {digits}", param="digits")
    if not examples:
        raise ConfigError("no documents to plant canaries in", param="data")
    rng = random.Random(seed)
    pairs = []
    for _ in range(trials):
        canary = f"{rng.randrange(10 ** digits):0{digits}d}"
        other = canary
        while other == canary:
            other = f"{rng.randrange(10 ** digits):0{digits}d}"
        pairs.append((canary, other))
    # the coins: a seeded shuffle of as many heads as tails (one more head for an odd count),
    # so that both sides have trials to measure
    coins = [t < (trials + 1) // 2 for t in range(trials)]
    rng.shuffle(coins)
    return [CanaryTrial(t, examples[t % len(examples)].id, examples[t % len(examples)].context,
                        canary, other, coin)
            for t, ((canary, other), coin) in enumerate(zip(pairs, coins))]


def attack_score(response: str, canary: str) -> int:
    """The attacker's score of one response: how many of the target canary's characters the
    response repeats, in any order, each counted as often as the canary holds it (the size of
    the multiset intersection, 0 to ``len(canary)``). A mechanism that leaks the digits out of
    order, shuffled or spread over the response, scores as high as one that leaks them in order;
    the longest shared substring (the score it replaces) is never above it, and a leak in
    order scores the same under both."""
    return int(sum((Counter(response) & Counter(canary)).values()))


def guarantee(composed: Sequence[float | None]) -> float | None:
    """The guarantee the lower bound is held against: the largest composed ε (Thm B.1, basic
    composition over the released tokens, the stopping EOS included) of the trials' responses;
    None when any response was decoded without a bound."""
    if not composed or any(e is None for e in composed):
        return None
    return float(max(e for e in composed if e is not None))


def reading(summary: dict[str, Any]) -> str:
    """One sentence: the two bounds side by side and what they mean."""
    lo, up = summary["eps_lower"], summary.get("eps_guarantee")
    conf = f"{100 * summary['confidence']:.0f} %"
    rates = ", ".join(f"{name} {summary[key]:.2f}" for name, key in (("TPR", "tpr"), ("FPR", "fpr"))
                      if summary.get(key) is not None)
    head = (f"An attacker demonstrates ε ≥ {lo:.3g} at {conf} confidence ({rates} on "
            f"{summary['n_in'] + summary['n_out']} measured trials")
    top = summary.get("eps_max_showable")
    head += ")" if top is None else f"; no attack on these trials could show more than {top:.3g})"
    if up is None:
        return head + "; the setting has no bound, so this is the leak an attacker can demonstrate."
    up_text = f"ε = {up:.3g}" + (f" (δ = {summary['delta']:.2g})" if summary.get("delta")
                                  else "")
    if summary["law"] == VIOLATED:
        return head + (f", above the claimed guarantee {up_text} per response: the mechanism "
                       f"is not as private as it claims.")
    return head + f", under the guarantee {up_text} per response."


def summarize_trials(records: Sequence[dict[str, Any]], *, seed: int = 0,
                     confidence: float = CONFIDENCE, threshold: float | None = None,
                     delta: float = 0.0) -> dict[str, Any]:
    """The audit's summary from its records (each with ``score``, ``included`` and
    ``composed_eps``, None for an unbounded response): the lower bound
    (:func:`audit_scores`), the guarantee (:func:`guarantee`), the law and its reading.
    ``delta``: the guarantee's δ (an (ε, δ) claim): the lower bound is then the one the same
    counts give with δ taken off (:func:`.lower_bound.eps_lower_bound`), set against ε."""
    if len(records) < 2:
        raise ConfigError(f"an audit needs at least 2 trials, got {len(records)}", param="trials")
    # the split-half rule, as this audit has always been read: its stored numbers are checked
    # (checks.counts_and_bound) against the counts at the summary's confidence, which the
    # all-trials rule's Bonferroni share would not match
    out = audit_scores([r["score"] for r in records], [bool(r["included"]) for r in records],
                       seed=seed, confidence=confidence, threshold=threshold, rule=SPLIT_HALF)
    if delta:  # the same test, held against an (ε, δ) claim
        out.update({k: v for k, v in eps_lower_bound(
            out["tp"], out["n_in"], out["fp"], out["n_out"], out["bound_confidence"],
            delta).items() if k in ("eps_lower", "from")})
    up = guarantee([r.get("composed_eps") for r in records])
    out.update({"n_trials": len(records), "eps_guarantee": up, "delta": float(delta),
                "law": law(out["eps_lower"], up)})
    out["reading"] = reading(out)
    return out


# CONFIDENCE and law: re-exported from lower_bound for the modules that import them from here
__all__ = ["CANARY_QUERY", "CANARY_SENTENCE", "CONFIDENCE", "CanaryTrial", "attack_score",
           "guarantee", "law", "plant_canaries", "reading", "summarize_trials"]
