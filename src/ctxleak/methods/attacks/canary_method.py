"""The canary audit as a Method (``ctxleak canary``): one item per canary trial, every trial's
response drawn by Context Influence Decoding in one batched KV cache, the attacker's score per
response, and the summary with the empirical ε lower bound beside bounded CID's guarantee
(:mod:`ctxleak.methods.attacks.canary` has the maths and what the two bounds mean)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, warn
from ctxleak.methods.attacks.canary import (
    CANARY_QUERY,
    CANARY_SENTENCE,
    CanaryTrial,
    attack_score,
    plant_canaries,
    summarize_trials,
)
from ctxleak.methods.attacks.lower_bound import CONFIDENCE, SPLIT_HALF, documents_needed
from ctxleak.methods.influence.data import load_examples, resolve_data
from ctxleak.methods.influence.roads import influence_needs
from ctxleak.methods.influence.setting import Setting
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.ledger import RowLedger
from ctxleak.mitigations.mechanisms import AnswerRequest, Asked, Decoding
from ctxleak.run.inputs import describe
from ctxleak.run.method import ItemIds, ParamsMethod, Plan, batches_by_cost

#: The largest number of trials :func:`trials_needed` looks at, and the most an audit runs (each
#: is one response drawn and one record kept: refused before any is planted).
MAX_TRIALS = 100_000


def _default_decoding() -> tuple[CID, Decoding]:
    """The command's CID setting: λ = 1, T = 0.8 and 8 new tokens, all of them released."""
    return CIDConfig(max_new_tokens=8, min_new_tokens=8)


@dataclass(frozen=True)
class CanaryParams:
    """The audit's own parameters, checked on construction: the CID setting (``decoding``, CID
    and its decoding as :func:`~ctxleak.mitigations.cid.CIDConfig` gives them; default: the
    command's, λ = 1, T = 0.8 and 8 new tokens, all released), the number of ``trials``, the
    canary's ``digits``, the bound's ``confidence`` and a ``threshold`` fixed in advance (None:
    chosen on half of the trials)."""

    decoding: tuple[CID, Decoding] = field(default_factory=_default_decoding)
    trials: int = 40
    digits: int = 6
    confidence: float = CONFIDENCE
    threshold: float | None = None

    def __post_init__(self) -> None:
        if not 2 <= self.trials <= MAX_TRIALS:
            raise ConfigError(f"trials must be from 2 to {MAX_TRIALS:,} (each is one response "
                              f"drawn and kept), not {self.trials:,}", param="trials")
        if not 0 < self.confidence < 1:
            raise ConfigError(f"confidence must be in (0, 1), not {self.confidence}",
                              param="confidence")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ConfigError(f"threshold must be a finite number, not {self.threshold}",
                              param="threshold")
        if self.threshold is not None and self.threshold > self.digits:
            warn(f"threshold {self.threshold:g} is above the canary's {self.digits} digits: no "
                 "response can score it, so every trial guesses 'not planted' and the ε lower "
                 "bound is 0", param="threshold")

    def to_config(self) -> dict[str, Any]:
        cid, d = self.decoding
        return {"lambda": cid.lam, "temperature": d.temperature, "bounded_eps": cid.bounded_eps,
                "max_new_tokens": d.max_new_tokens, "min_new_tokens": d.min_new_tokens,
                "trials": self.trials, "digits": self.digits, "confidence": self.confidence,
                "threshold": self.threshold, "canary_sentence": CANARY_SENTENCE,
                "query": CANARY_QUERY,
                "neighbours": "the document with the target canary vs. the same document with "
                              "another random canary (replacement)"}


def trial_record(lm: LanguageModel, trial: CanaryTrial, ledger: RowLedger) -> dict[str, Any]:
    """One trial's row: the coin and both canaries (recorded, so the audit can be checked), the
    response, its guarantee (``composed_eps``, None unbounded) and the attacker's ``score``,
    computed from the response and the target canary alone."""
    response = lm.decode(ledger.response_ids)
    return {"trial": trial.trial, "document_id": trial.document_id, "canary": trial.canary,
            "other": trial.other, "included": trial.included, "response": response,
            "response_ids": ledger.response_ids, "stopped_on_eos": ledger.stopped_on_eos,
            "released_tokens": len(ledger.entries), "composed_eps": ledger.composed_eps,
            "score": attack_score(response, trial.canary)}


def measure_trials(lm: LanguageModel, trials: Sequence[CanaryTrial],
                   configs: Sequence[tuple[CID, Decoding]], seed: int) -> list[dict[str, Any]]:
    """Each trial's record (:func:`trial_record`) under its own decoding setting, all responses
    drawn by CID in one batched KV cache, each from its own seed (``seed``, trial number). The
    audit reads only the tokens, so the ledgers' floats are not replayed one by one."""
    asked = []
    for trial, (cid, decoding) in zip(trials, configs, strict=True):
        prompt = trial.parts(lm, decoding.max_new_tokens).prompt_of((trial.context,))
        request = AnswerRequest((trial.context,), prompt, derive_seed(seed, trial.trial))
        asked.append(Asked(cid, request, decoding))
    answers = CID().answer_group(lm, asked, deployed=False, rescored=True)
    # CID's answers always carry their ledger
    return [trial_record(lm, t, cast(RowLedger, a.ledger)) for t, a in zip(trials, answers)]


def trials_needed(tpr: float, fpr: float, confidence: float = CONFIDENCE,
                  target: float = 0.0) -> int | None:
    """The fewest trials (half choosing the threshold, half measuring, half the coins heads) whose
    expected counts at these true and false positive rates give a lower bound above ``target``
    at ``confidence``; None when the rates cannot (TPR ≤ FPR) or need more than
    :data:`MAX_TRIALS`. Every count is tried in order (:func:`.lower_bound.documents_needed`):
    the criterion is not monotone, so a bisection could name more trials than suffice."""
    return documents_needed(tpr, fpr, confidence, rule=SPLIT_HALF, target=target,
                            most=MAX_TRIALS)


class CanaryMethod(ParamsMethod[CanaryTrial, list[CanaryTrial], LanguageModel, CanaryParams]):
    """An attack's empirical ε lower bound beside the guarantee (``ctxleak canary``).
    ``common``: the run options; ``params``: the method's own (:class:`CanaryParams`)."""

    name = "canary"
    desc = "canary"
    unit = "trials"
    params_type = CanaryParams

    def plan(self, data: Any) -> Plan[CanaryTrial, list[CanaryTrial]]:
        """The trials, planted in the data's documents from the run seed (only each row's
        context and id are read: the trial asks its own question, so a row needs no query)."""
        examples = load_examples(data, task="summarization", limit=self.common.limit)
        trials = plant_canaries(examples, self.params.trials, self.common.seed, self.params.digits)
        return Plan(items=trials, state=trials,
                    config={"data": describe(data), **self.params.to_config()},
                    inputs={"data": resolve_data(data)})

    def ids(self, item: CanaryTrial) -> ItemIds:
        return ItemIds(item.key, item.key)

    def requires(self) -> dict[str, str]:
        cid, d = self.params.decoding
        return influence_needs([cid.lam], [d.temperature], cid.bounded_eps)

    def prepare(self, lm: LanguageModel, plan: Plan[CanaryTrial, list[CanaryTrial]],
                run: Any) -> LanguageModel:
        return lm

    def batches(self, ready: LanguageModel, items: Sequence[CanaryTrial],
                policy: BatchPolicy) -> list[list[CanaryTrial]]:
        """Two CID streams per trial, each its prompt plus the new tokens."""
        new = self.params.decoding[1].max_new_tokens
        costs: list[int | None] = []
        for trial in items:
            parts = trial.parts(ready, reserve=new)
            costs.append(len(parts.full) + len(parts.empty) + 2 * new)
        return list(batches_by_cost(items, costs, policy))

    def measure(self, lm: LanguageModel, ready: LanguageModel,
                items: Sequence[CanaryTrial]) -> list[dict[str, Any]]:
        """The trials' responses in one batched call (:func:`measure_trials`)."""
        return measure_trials(lm, items, [self.params.decoding] * len(items), self.common.seed)

    def summarize(self, ready: Any, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The bounds side by side (:func:`.canary.summarize_trials`), the setting, the
        guarantee a response of ``max_new_tokens`` could spend, and the trials needed to show a
        bound above 0 at the measured rates."""
        p = self.params
        cid, d = p.decoding
        out = summarize_trials(records, seed=self.common.seed, confidence=p.confidence,
                               threshold=p.threshold)
        # the influence run's key
        key = Setting.cid(cid.lam, d.temperature, None, cid.bounded_eps).key
        out.update({"setting": key, "lambda": cid.lam, "temperature": d.temperature,
                    "bounded_eps": cid.bounded_eps,
                    "eps_guarantee_ex_ante": (None if cid.bounded_eps is None
                                              else cid.bounded_eps * d.max_new_tokens),
                    "trials_needed": (None if out["tpr"] is None or out["fpr"] is None else
                                      trials_needed(out["tpr"], out["fpr"], p.confidence))})
        return out


__all__ = ["CanaryMethod", "CanaryParams", "measure_trials", "trial_record", "trials_needed"]
