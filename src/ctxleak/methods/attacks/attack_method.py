"""The black-box attacks as Methods: questions to a :class:`ctxleak.targets.base.Target`, one
record per question, and a summary with the attacks' tables and the per-document ledger.

- :class:`ExtractMethod`: context extraction (:mod:`.extract`, "The Good and The Bad:
  Exploring Privacy Issues in Retrieval-Augmented Generation"); the data are the documents of
  the datastore, each answer matched against every one of them;
- :class:`MembershipMethod`: membership inference (:mod:`.membership`: direct, mask-based,
  interrogation and calibrated attacks); the data are the members and the non-members.

Neither needs anything of a model: :meth:`requires` asks for answers only, and the runner hands
the target, journaled, to :meth:`prepare` (:func:`ctxleak.run.runner.run_method`). The target
owns its concurrency and retries; a question it cannot answer raises
:class:`ctxleak.targets.base.TargetError`, and the records of the batches answered before it
stay in the run folder for a resume. A batch is ``params.batch`` questions, sent in one
:meth:`Target.answer` call. :func:`attack_documents` and :func:`anchor_list` read the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from numbers import Integral
from typing import Any

from ctxleak.domains import real, whole
from ctxleak.engine.batching import BatchPolicy
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_claims import (
    answers_claim,
    claim_fields,
    document_eps,
    queries_per_document,
)
from ctxleak.methods.attacks.attack_inputs import anchor_list, attack_documents
from ctxleak.methods.attacks.attack_ledger import attack_ledger
from ctxleak.methods.attacks.canary import CONFIDENCE, law
from ctxleak.methods.attacks.crawl import Crawler, coverage_summary, crawl_round
from ctxleak.methods.attacks.extract import (
    COMMANDS,
    AttackDocument,
    ExtractPrompt,
    document_values,
    extraction_prompts,
    extraction_summary,
    match_answer,
)
from ctxleak.methods.attacks.lower_bound import documents_needed
from ctxleak.methods.attacks.membership import (
    ATTACKS,
    DEFAULT_ATTACKS,
    NO_QUESTION,
    PERTURBATIONS,
    MembershipQuestion,
    check_membership,
    membership_data,
    membership_questions,
    membership_summary,
    score_answer,
)
from ctxleak.methods.attacks.roc import RESAMPLES
from ctxleak.methods.attacks.separation import lead_with_separation
from ctxleak.run.method import ParamsMethod, Plan
from ctxleak.targets.base import ANSWERS, Target, TargetAnswer


@dataclass(frozen=True)
class AttackReady:
    """What the attacks' :meth:`prepare` hands on: the ``target`` asked, the ``documents`` the
    answers are matched against (by id) and their secrets and personal data (``values``; empty
    where the attack does not look for them: :attr:`_AttackMethod.finds_values`), an adaptive
    extraction's crawl (:class:`.crawl.Crawler`) and a membership audit's ``members`` (ids)."""

    target: Target
    documents: dict[str, AttackDocument]
    values: dict[str, dict[str, str]]
    crawl: Crawler | None = None
    members: frozenset[str] = frozenset()


@dataclass(frozen=True)
class InfluenceRun:
    """An influence run's (``path``) ledger per document, of its ``setting``: to join by id."""

    path: str
    setting: str
    rows: tuple[Mapping[str, Any], ...]


def _check_batch(batch: int) -> None:
    whole(batch, "batch", minimum=1, maximum=1024)


def _retrieved(answer: TargetAnswer) -> list[str] | None:
    return None if answer.document_ids is None else list(answer.document_ids)


@dataclass(frozen=True)
class ExtractParams:
    """The extraction attack's parameters: the anchors' ``kind`` (``targeted``: drawn from the
    documents; ``untargeted``: from a seeded word list), the number of ``queries`` (default: one
    per document), ``anchors`` given instead, the ``command``, ``anchor_words``, ``batch``
    (questions per call to the target), the ``influence`` run whose ledger is joined, and
    ``adaptive``: each later query's anchor chosen from the words the answers gave so far
    (:mod:`.crawl`), within the same ``queries``; ``classes``: the operator's class of each
    document id (the ledger ranks class ``public`` last)."""

    kind: str = "targeted"
    queries: int | None = None
    anchors: tuple[str, ...] | None = None
    command: str = COMMANDS[0]
    anchor_words: int = 8
    batch: int = 8
    influence: InfluenceRun | None = None
    adaptive: bool = False
    classes: Mapping[str, str] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.adaptive, bool):
            raise ConfigError(f"adaptive must be True or False, not {self.adaptive!r}",
                              param="adaptive")
        whole(self.queries, "queries", allow_none=True)
        whole(self.anchor_words, "anchor_words", minimum=1, maximum=1000)
        if self.adaptive and self.queries is not None and self.queries < 1:
            raise ConfigError(f"queries must be at least 1 for an adaptive extraction (its "
                              f"budget of queries), not {self.queries}", param="queries")
        if self.kind not in ("targeted", "untargeted"):
            raise ConfigError(f"kind must be 'targeted' or 'untargeted', not {self.kind!r}",
                              param="kind")
        whole(self.queries, "queries", minimum=1, allow_none=True)
        if not self.command.strip():
            raise ConfigError("command must not be empty", param="command")
        _check_batch(self.batch)

    def to_config(self) -> dict[str, Any]:
        # the prompt's command apart from the run's own (config["command"]: the method's name)
        return {"attack": "extract", "kind": self.kind, "queries": self.queries,
                "anchors": list(self.anchors or []) or None, "prompt_command": self.command,
                "anchor_words": self.anchor_words, "batch": self.batch,
                "influence": None if self.influence is None else self.influence.path,
                # only where set: the configs (and resumes) of fixed runs stay as they were
                **({"adaptive": True} if self.adaptive else {}),
                **({"classes": dict(self.classes)} if self.classes is not None else {})}

    def budget(self, documents: int) -> int:
        """The queries asked: ``queries``, else one per anchor given, else one per document."""
        return self.queries if self.queries is not None else \
            len(self.anchors) if self.anchors else documents


class _AttackMethod(ParamsMethod[Any, Any, AttackReady, Any]):
    """What both attacks share: answers only, the target handed on, batches of
    ``params.batch`` questions, the target named in the provenance, the ledger joined to the
    influence run's where one is given."""

    def requires(self) -> dict[str, str]:
        return {ANSWERS: f"{self.name} asks a Target (ctxleak.targets: a chat endpoint, a chain, "
                         "a function, a RAG app) and reads only its answers: give it one"}

    #: Whether the answers are searched for the documents' secrets and personal data (the
    #: extraction attack's; membership reads only the words asked for, so it skips the search).
    finds_values = False

    def prepare(self, over: Target, plan: Plan[Any, Any], run: Any) -> AttackReady:
        docs: list[AttackDocument] = plan.state
        return AttackReady(over, {d.id: d for d in docs},
                           document_values(docs) if self.finds_values else {})

    def batches(self, ready: AttackReady, items: Sequence[Any],
                policy: BatchPolicy) -> list[list[Any]]:
        size = self.params.batch
        return [list(items[k:k + size]) for k in range(0, len(items), size)]

    def provenance(self, over: Target, ready: AttackReady) -> dict[str, Any]:
        return {"target": ready.target.describe()}

    def _per_document(self, ready: AttackReady, **records: Sequence[Mapping[str, Any]]
                      ) -> dict[str, Any]:
        """The ledger per document of ``records`` (by attack), joined to the influence run's."""
        joined: InfluenceRun | None = self.params.influence
        return {"ledger": attack_ledger(list(ready.documents.values()), **records,
                                        influence=None if joined is None else joined.rows,
                                        classes=self.params.classes),
                **({} if joined is None else {"influence_run": {"path": joined.path,
                                                                 "setting": joined.setting}})}


def _rows(docs: Sequence[AttackDocument]) -> list[dict[str, str]]:
    return [{"id": d.id, "text": d.text} for d in docs]


class ExtractMethod(_AttackMethod):
    """Context extraction against a target (module docstring); data: the datastore's
    documents (strings, dicts with ``id`` and ``text``, or :class:`.extract.AttackDocument`)."""

    name = "attack-extract"
    desc = "extraction"
    unit = "queries"
    params_type = ExtractParams
    finds_values = True

    def plan(self, data: Any) -> Plan[ExtractPrompt, list[AttackDocument]]:
        p: ExtractParams = self.params
        docs = attack_documents(data if data is not None else [])
        prompts = extraction_prompts(docs, kind=p.kind, n=p.queries, seed=self.common.seed,
                                     anchors=p.anchors, command=p.command,
                                     anchor_words=p.anchor_words)
        if p.adaptive:  # the fixed prompts: the seeds, and each slot's prompt when no word is left
            budget = p.budget(len(docs))
            drawn = extraction_prompts(docs, kind=p.kind, n=budget, seed=self.common.seed,
                                       command=p.command, anchor_words=p.anchor_words)
            prompts = [ExtractPrompt(k, q.kind, q.anchor, q.command, q.source)
                       for k, q in enumerate([*prompts, *drawn][:budget])]
        return Plan(items=prompts, state=docs,
                    config={"documents": f"<{len(docs)} documents>", **p.to_config()},
                    inputs={"documents": _rows(docs)}, questions=[q.question for q in prompts],
                    questions_later=p.adaptive)

    def _round(self, ready: AttackReady) -> int:
        return crawl_round(self.params.batch, self.params.budget(len(ready.documents)))

    def prepare(self, over: Target, plan: Plan[Any, Any], run: Any) -> AttackReady:
        """The documents and their values; for an adaptive run the crawl, with the answers a
        resumed run folder already holds read back into it, in the order they were asked."""
        ready = super().prepare(over, plan, run)
        if not self.params.adaptive:
            return ready
        crawl = Crawler(self.params.command, self.common.seed)
        order = {self.ids(p).key: p.index for p in plan.items}
        stored = sorted(run.rows(), key=lambda r: order.get(r.get("id"), len(order)))
        crawl.replay(stored)
        return replace(ready, crawl=crawl)

    def batches(self, ready: AttackReady, items: Sequence[Any],
                policy: BatchPolicy) -> list[list[Any]]:
        """``batch`` questions a call; an adaptive run's rounds (:func:`.crawl.crawl_round`)."""
        size = self._round(ready) if ready.crawl is not None else self.params.batch
        return [list(items[k:k + size]) for k in range(0, len(items), size)]

    def measure(self, over: Target, ready: AttackReady,
                items: Sequence[ExtractPrompt]) -> list[dict[str, Any]]:
        """One record per prompt: the prompt, the answer, the documents the target says it
        retrieved, and what the answer copied of each document (:func:`.extract.match_answer`);
        an adaptive run's prompts after its first round chosen by the crawl
        (:meth:`.crawl.Crawler.choose`), which then reads their answers."""
        if ready.crawl is not None:
            items = ready.crawl.choose(items, self._round(ready))
        answers = over.answer([p.question for p in items])
        docs = list(ready.documents.values())
        if ready.crawl is not None:
            for p, a in zip(items, answers):
                ready.crawl.observe(p.question, a.text)
        return [{"kind": p.kind, "anchor": p.anchor, "command": p.command, "source": p.source,
                 "question": p.question, "answer": a.text, "retrieved": _retrieved(a),
                 "matches": match_answer(a.text, docs, ready.values, p.question),
                 **claim_fields(a)}
                for p, a in zip(items, answers)]

    def summarize(self, ready: AttackReady, records: Sequence[Mapping[str, Any]]
                  ) -> dict[str, Any]:
        """The totals (:func:`.extract.extraction_summary`), the coverage against the queries
        (:func:`.crawl.coverage_summary`), the claim the answers say they were released under
        (:func:`answers_claim`) and the ledger."""
        return {**extraction_summary(records, list(ready.documents.values())),
                **coverage_summary(records, len(ready.documents),
                                   adaptive=self.params.adaptive),
                "target": ready.target.describe(), "claim": answers_claim(records),
                **self._per_document(ready, extraction=records)}


@dataclass(frozen=True)
class MembershipParams:
    """The membership attacks' parameters: which ``attacks``, ``masks`` per document
    (mask-based and calibrated), ``questions`` per document (interrogation), ``perturbations``
    per document (calibrated: perturbed queries beside the original), the ``confidence`` of the
    intervals and the ε lower bound, the bootstrap ``resamples``, the ε the target's mitigation
    claims per document (``eps_claimed``; None: the one its answers say, where each does, as
    ``ctxleak serve``'s do, else no claim), ``batch``, the ``influence`` run joined and the
    documents' ``classes`` (the ledger ranks class ``public`` last)."""

    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    masks: int = 5
    questions: int = 3
    perturbations: int = PERTURBATIONS
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    eps_claimed: float | None = None
    batch: int = 8
    influence: InfluenceRun | None = None
    classes: Mapping[str, str] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        unknown = [a for a in self.attacks if a not in ATTACKS]
        if unknown or not self.attacks:
            raise ConfigError(f"attacks must be some of {', '.join(ATTACKS)}, not "
                              f"{list(self.attacks)}", param="attacks")
        for name, value, what in (("masks", self.masks, "words masked"),
                                  ("questions", self.questions, "questions"),
                                  ("perturbations", self.perturbations, "perturbed queries")):
            if isinstance(value, bool) or not isinstance(value, Integral) or \
                    not 1 <= value <= 100:
                raise ConfigError(f"{name} must be a whole number from 1 to 100 ({what} per "
                                  f"document), not {value!r}", param=name)
        real(self.confidence, "confidence", minimum=0, maximum=1, strict_min=True,
             strict_max=True)
        whole(self.resamples, "resamples", minimum=100, maximum=1_000_000)
        real(self.eps_claimed, "eps_claimed", minimum=0, allow_none=True)
        _check_batch(self.batch)

    def to_config(self) -> dict[str, Any]:
        # perturbations only where the calibrated attack runs: the other runs' configs (and
        # their resumes) stay as they were
        calibrated = {"perturbations": self.perturbations} if "calibrated" in self.attacks \
            else {}
        return {"attack": "membership", "attacks": list(self.attacks), "masks": self.masks,
                "questions": self.questions, **calibrated, "confidence": self.confidence,
                "resamples": self.resamples, "eps_claimed": self.eps_claimed,
                "batch": self.batch,
                "influence": None if self.influence is None else self.influence.path,
                **({"classes": dict(self.classes)} if self.classes is not None else {})}



class MembershipMethod(_AttackMethod):
    """Membership inference against a target (module docstring); data: the members and the
    non-members (:func:`.membership.membership_data`)."""

    name = "attack-membership"
    desc = "membership"
    unit = "queries"
    params_type = MembershipParams

    def plan(self, data: Any) -> Plan[MembershipQuestion, list[AttackDocument]]:
        p: MembershipParams = self.params
        ins, outs = check_membership(*membership_data(data))
        questions = membership_questions(ins, outs, attacks=p.attacks, masks=p.masks,
                                         questions=p.questions,
                                         perturbations=p.perturbations)
        return Plan(items=questions, state=[*ins, *outs],
                    config={"members": f"<{len(ins)} documents>",
                            "non_members": f"<{len(outs)} documents>", **p.to_config()},
                    inputs={"members": _rows(ins), "non_members": _rows(outs)},
                    questions=[q.question for q in questions])

    def prepare(self, over: Target, plan: Plan[Any, Any], run: Any) -> AttackReady:
        ins = frozenset(row["id"] for row in plan.inputs["members"])
        return replace(super().prepare(over, plan, run), members=ins)

    def measure(self, over: Target, ready: AttackReady,
                items: Sequence[MembershipQuestion]) -> list[dict[str, Any]]:
        """One record per question (:func:`.membership.score_answer`), with the documents the
        target says it retrieved and whether the asked one is among them."""
        answers = over.answer([q.question for q in items])
        out = []
        for q, a in zip(items, answers):
            record = score_answer(q, a.text, ready.documents[q.document_id])
            retrieved = _retrieved(a)
            record.update(retrieved=retrieved, asked_retrieved=None if retrieved is None
                          else q.document_id in retrieved, **claim_fields(a))
            out.append(record)
        return out

    def summarize(self, ready: AttackReady, records: Sequence[Mapping[str, Any]]
                  ) -> dict[str, Any]:
        """Per attack: ROC, AUC with its interval, TPR at FPR 1 % and 10 %, the ε lower bound
        at 1 − α/k with its power (:func:`.membership.membership_summary`), beside
        ``eps_claimed`` (given, or from the claim every answer says it was released under,
        ``claim``: :func:`answers_claim`, :func:`document_eps`) with the ``law``
        (:func:`.canary.law`) and the ``documents_needed`` (half members) to show an ε above 0
        at the measured rates under the same threshold rule and confidence
        (:func:`.lower_bound.documents_needed`), and ``unasked``: the documents the attack had
        no question for, left out of its ROC (completion's counted as guessed non-members:
        ``abstained``); the joint figures (``eps_lower``: the best attack's bound at
        ``confidence`` jointly, ``eps_max_showable``, ``verdict`` …) with the ``law`` of the
        best bound; the ledger."""
        p: MembershipParams = self.params
        out = membership_summary(records, seed=self.common.seed, confidence=p.confidence,
                                 resamples=p.resamples,
                                 documents={i: i in ready.members for i in ready.documents})
        claim = answers_claim(records)
        claimed = p.eps_claimed
        if claimed is None and claim is not None and claim["answers"] == len(records):
            # every answer said its claim (ctxleak serve's): per document over the queries
            claimed = document_eps(claim["eps_max"], claim["delta"], claim["relation"],
                                   queries_per_document(p.attacks, p.questions,
                                                        p.perturbations))
        for name in p.attacks:  # an attack that made no question is named, not dropped
            out["attacks"].setdefault(name, {"skipped": NO_QUESTION[name]})
        for name, attack in out["attacks"].items():
            asked = {r["document_id"] for r in records if r["attack"] == name}
            attack["unasked"] = sorted(set(ready.documents) - asked)
            if "eps" in attack:
                eps = attack["eps"]
                eps["eps_claimed"] = claimed
                eps["law"] = law(eps["eps_lower"], claimed)
                eps["documents_needed"] = None if eps["tpr"] is None or eps["fpr"] is None \
                    else documents_needed(eps["tpr"], eps["fpr"], eps["confidence"],
                                          rule=eps["threshold_rule"],
                                          candidates=eps["candidates"])
        if out.get("eps_lower") is not None:
            out["law"] = law(out["eps_lower"], claimed)
        out = lead_with_separation(out)  # no bound, but a separation: said first, in numbers
        return {**out, "target": ready.target.describe(), "eps_claimed": claimed,
                "claim": claim, **self._per_document(ready, membership=records)}


__all__ = ["AttackReady", "ExtractMethod", "ExtractParams", "InfluenceRun", "MembershipMethod",
           "MembershipParams", "anchor_list", "answers_claim", "attack_documents", "claim_fields",
           "document_eps", "queries_per_document"]
