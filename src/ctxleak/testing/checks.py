"""The checks every mechanism must pass, as scikit-learn's ``check_estimator`` certifies an
estimator: a third party's defence (or one of ctxleak's) run against what ctxleak's consumers
(an influence run, a frontier, the attack targets, ``ctxleak serve``) ask of a
:class:`~ctxleak.mitigations.mechanisms.Mechanism`.

Each check takes the mechanism and a :class:`Bench` (the model and the requests it answers) and
returns what it found, or raises :class:`CheckFailed` saying what is wrong in one line. The
model is the digit copier (:mod:`.digit_copier`): it copies the digits its prompt holds, so the
canary audit ("Auditing Differentially Private Machine Learning: How Private is Private SGD?",
Jagielski, Ullman and Oprea) sees a mechanism that lets a document's digits through without
the noise its claim needs, on a CPU in seconds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxleak.engine.generation import derive_seed
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.canary import attack_score, plant_canaries, summarize_trials
from ctxleak.methods.attacks.lower_bound import VIOLATED
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.losses import within_claim
from ctxleak.mitigations.mechanisms import Mechanism, MechanismAnswer, claim_of
from ctxleak.testing.bench import (
    DIGITS,
    DOCUMENTS,
    THRESHOLD,
    TRIALS,
    Bench,
    CheckFailed,
    datastore_for,
    fail,
)
from ctxleak.testing.served import check_served_view


def check_parameters_refused(mechanism: Mechanism, bench: Bench) -> str:
    """Bad parameters are refused when the mechanism is made, each in one line naming the
    parameter (:class:`~ctxleak.errors.ConfigError`): for every numeric field, NaN, infinity
    and a bool (``True`` is not a number); for every integer field, 2.5 too."""
    if not dataclasses.is_dataclass(mechanism):
        return "not a dataclass: no fields to try"
    tried = 0
    for f in dataclasses.fields(mechanism):
        value = getattr(mechanism, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not f.init:
            continue
        bad: list[Any] = [math.nan, True] + ([math.inf] if isinstance(value, float) else [2.5])
        for wrong in bad:
            tried += 1
            try:
                dataclasses.replace(mechanism, **{f.name: wrong})
            except ConfigError as exc:
                text = str(exc)
                if "\n" in text or len(text) > 300:
                    raise fail(f"{f.name}={wrong!r} is refused, but not in one line: "
                                f"{text[:120]!r}") from None
                if f.name not in text and getattr(exc, "param", None) != f.name:
                    raise fail(f"{f.name}={wrong!r} is refused without naming {f.name}: "
                                f"{text!r}") from None
            except Exception as exc:  # noqa: BLE001 - anything but a ConfigError is the defect
                raise fail(f"{f.name}={wrong!r} raises {type(exc).__name__} ({exc}), not a "
                            f"one-line ConfigError") from None
            else:
                raise fail(f"{f.name}={wrong!r} is accepted") from None
    return f"{tried} bad values refused"


def _same(a: MechanismAnswer, b: MechanismAnswer) -> bool:
    return (a.response_ids, a.stopped_on_eos, a.claim, a.tokens_paid) == \
        (b.response_ids, b.stopped_on_eos, b.claim, b.tokens_paid)


def check_same_seed_same_answer(mechanism: Mechanism, bench: Bench) -> str:
    """A request's answer depends on its seed only: asked twice it is the same, alone or in a
    batch with another request; two seeds are allowed to differ."""
    one = bench.request(mechanism, seed=derive_seed(0, 1))
    other = bench.request(mechanism, seed=derive_seed(0, 2), text="Billing record .")
    first = mechanism.answer(bench.lm, [one], bench.decoding)
    again = mechanism.answer(bench.lm, [one], bench.decoding)
    batched = mechanism.answer(bench.lm, [other, one], bench.decoding)
    if len(first) != 1 or len(batched) != 2:
        raise fail(f"answer gave {len(first)} and {len(batched)} answers for 1 and 2 requests")
    if not _same(first[0], again[0]):
        raise fail("the same request with the same seed gave two different answers")
    if not _same(first[0], batched[1]):
        raise fail("a request's answer changed when another request shared its batch")
    return f"{len(first[0].response_ids)} tokens, repeated alone and in a batch"


def check_claim_from_steps(mechanism: Mechanism, bench: Bench) -> str:
    """What each answer says it spent is within the mechanism's claim (the same relation, an ε
    and a δ no larger), every recorded step names its token and whether it paid, and the
    tokens the answer says it paid for are those its steps record as paid. (The ε its steps
    used, summed, may exceed the claim where the claim composes them more tightly than a sum,
    as DP-RAG's does.)"""
    claim = claim_of(mechanism, bench.decoding)
    answers = mechanism.answer(bench.lm, [bench.request(mechanism, seed=derive_seed(1, k))
                                          for k in range(4)], bench.decoding)
    for answer in answers:
        spent = answer.claim
        if spent.relation != claim.relation:
            raise fail(f"an answer claims relation {spent.relation!r}, the mechanism "
                        f"{claim.relation!r}")
        if claim.eps is None:
            continue
        if spent.eps is None or not within_claim(spent.eps, claim.eps) or \
                spent.delta > claim.delta + 1e-15:
            raise fail(f"an answer spent (ε = {spent.eps}, δ = {spent.delta}), beyond the "
                        f"claim (ε = {claim.eps}, δ = {claim.delta})")
        if any("token_id" not in s or "paid" not in s for s in answer.steps):
            raise fail("a recorded step lacks its token_id or paid")
        # a step that releases no token (DP-KSA's keyword release) pays for none
        paid = sum(bool(s["paid"]) for s in answer.steps if s["token_id"] is not None)
        if answer.steps and paid != answer.tokens_paid:
            raise fail(f"the answer says {answer.tokens_paid} tokens paid, its steps record "
                        f"{paid}")
        if answer.tokens_paid > answer.released:
            raise fail(f"{answer.tokens_paid} tokens paid of {answer.released} released")
    return ("no guarantee claimed" if claim.eps is None
            else f"4 answers within (ε = {claim.eps:.4g}, δ = {claim.delta:.2g}), {claim.relation}")


def check_charges_within_claim(mechanism: Mechanism, bench: Bench) -> str:
    """What an answer charges each document (a privacy filter's individual charge, or the
    claim where the mechanism has none) is never above its claim, and the whole charge of an
    answer is the claim's; over a datastore, each of its documents' own loss recomputed from
    the answer's steps (where the mechanism has one) stays within the claim."""
    claim = claim_of(mechanism, bench.decoding)
    charge = mechanism.charge(bench.decoding)
    if claim.eps is None:
        if charge.guaranteed:
            raise fail("no claim, but its charge is a guarantee's ε")
        return "no guarantee claimed: nothing charged as one"
    if charge.per_answer is not None and not within_claim(charge.per_answer, claim.eps):
        raise fail(f"an answer is charged ε = {charge.per_answer} per answer, beyond the "
                    f"claim ε = {claim.eps}")
    if not getattr(mechanism, "over_datastore", True):
        return "charged the claim; answers only from a request's documents"
    store = datastore_for(mechanism, with_canary=True)
    ids = [doc_id for doc_id, _ in store.documents]
    checked = 0
    for k in range(3):
        request = bench.request(mechanism, seed=derive_seed(2, k), datastore=store)
        charges = mechanism.document_charges(request, bench.decoding) or {}
        for doc, loss in charges.items():
            if not within_claim(loss.eps, claim.eps):
                raise fail(f"document {doc} is charged ε = {loss.eps} in one answer, beyond "
                            f"the claim ε = {claim.eps}")
        answer = mechanism.answer(bench.lm, [request], bench.decoding)[0]
        losses = mechanism.document_losses(bench.lm, request, answer, ids, bench.decoding)
        for own in losses or []:
            checked += 1
            if not math.isfinite(own.total) or not own.within:
                raise fail(f"its own loss of {own.document} recomputed from the steps is "
                            f"{own.total:.6g}, beyond the claim ε = {claim.eps:.6g}")
    return f"charges within ε = {claim.eps:.4g}; {checked} documents' own losses within it"


def _group(claim_relation: str, copies: int) -> int:
    """How many neighbouring steps apart a trial's two contexts are, under the claim's
    relation: every shard changed (shard), each document replaced, removed then added
    (document), the context replaced once (context)."""
    return {"shard": copies, "document": 2 * copies, "context": 1}[claim_relation]


def check_canary_audit(mechanism: Mechanism, bench: Bench) -> str:
    """The canary audit: each trial's documents state the target canary or another, the
    answer is scored by the canary's digits it repeats (a hit at :data:`THRESHOLD`), and the ε
    lower bound of that test (δ taken off) must not be above the claim's guarantee between the
    two contexts (group privacy over the steps that separate them). A mechanism whose noise
    is removed fails here."""
    claim = claim_of(mechanism, bench.decoding)
    if claim.eps is None:
        return "no guarantee claimed: nothing to audit"
    copies = max(1, mechanism.documents_needed())
    steps = _group(claim.relation, copies)
    group_eps = steps * claim.eps
    group_delta = claim.delta * sum(math.exp(i * claim.eps) for i in range(steps))
    trials = plant_canaries(load_examples(DOCUMENTS, task="summarization"), TRIALS, 0, DIGITS)
    requests = [dataclasses.replace(bench.request(mechanism, seed=derive_seed(0, t.trial)),
                                    documents=(t.context,) * copies) for t in trials]
    answers = mechanism.answer(bench.lm, requests, bench.decoding)
    records = [{"score": attack_score(bench.lm.decode(list(a.response_ids)), t.canary),
                "included": t.included, "composed_eps": group_eps}
               for t, a in zip(trials, answers)]
    summary = summarize_trials(records, threshold=THRESHOLD, delta=group_delta)
    found = (f"lower bound {summary['eps_lower']:.3g} against the guarantee "
             f"{group_eps:.3g} (TP {summary['tp']}/{summary['n_in']}, FP "
             f"{summary['fp']}/{summary['n_out']}, {steps} steps apart)")
    if summary["law"] == VIOLATED:
        raise fail(f"the canary audit's {found}: not as private as it claims")
    return found


#: The checks, in the order they run (the cheap ones first).
CHECKS: dict[str, Callable[[Mechanism, Bench], str]] = {
    "parameters_refused": check_parameters_refused,
    "same_seed_same_answer": check_same_seed_same_answer,
    "claim_from_steps": check_claim_from_steps,
    "charges_within_claim": check_charges_within_claim,
    "canary_audit": check_canary_audit,
    "served_view": check_served_view,
}



@dataclass
class CheckRecord:
    """One check's outcome: passed, and what it found or why it failed."""

    check: str
    passed: bool
    detail: str


@dataclass
class MechanismChecks:
    """What :func:`check_mechanism` found for one mechanism."""

    mechanism: str
    records: list[CheckRecord] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records)

    @property
    def failed(self) -> list[CheckRecord]:
        return [r for r in self.records if not r.passed]

    def summary(self) -> str:
        lines = [f"{self.mechanism}: {sum(r.passed for r in self.records)} of "
                 f"{len(self.records)} checks passed"]
        lines += [f"  {'ok  ' if r.passed else 'FAIL'} {r.check}: {r.detail}"
                  for r in self.records]
        return "\n".join(lines)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(r) for r in self.records])

    def raise_if_failed(self) -> None:
        """Raise :class:`CheckFailed` naming the first failed check."""
        if self.failed:
            first = self.failed[0]
            raise CheckFailed(f"{self.mechanism}: {first.check}: {first.detail}")
