"""The calibrated membership attack ("DCMI: A Differential Calibration Membership Inference Attack
Against Retrieval-Augmented Generation"), fast tier, function targets, no model: its queries and
score by hand on two documents; the controls (a target that repeats what it retrieves: AUC near
1; one that never reads its documents: AUC interval covering 0.5, ε lower bound 0); on a target
that leaks a seeded 60 % of its members verbatim, TPR at 1 % FPR and ε lower bound at least the
direct question's (its split-half bound by the same statistics); a target that says yes to
everything blinds the direct question, not this attack; bad ``perturbations`` refused."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

import pytest
from test_extract_membership_controls import (
    Overlap,
    corpus,
    ignorer,
    repeater,
    run_hooks,
    synthetic,
)
from test_membership import A, B  # the two documents of the mask attack's hand-made tests

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.attacks.attack_method import MembershipMethod, MembershipParams
from ctxleak.methods.attacks.calibrated import PERTURBATIONS, TEMPLATE
from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.lower_bound import audit_scores
from ctxleak.methods.attacks.membership import (
    ATTACKS,
    DEFAULT_ATTACKS,
    document_scores,
    membership_questions,
    membership_summary,
    score_answer,
    split_members,
)
from ctxleak.methods.attacks.roc import covers
from ctxleak.targets.base import FunctionTarget

#: Few resamples: the intervals' bootstrap is not what these tests look at.
FAST = {"resamples": 200}


def _first_line(question: str) -> str:
    return question.split("\n")[0]


def test_two_documents_queries_and_score_by_hand() -> None:
    qs = membership_questions([A], [B], attacks=["calibrated"], masks=2, perturbations=3)
    a = [q for q in qs if q.document_id == "a"]
    b = [q for q in qs if q.document_id == "b"]
    assert [q.part for q in a] == [q.part for q in b] == [0, 1, 2, 3]
    # the mask attack's choice: the rarest words once in the document, never side by side
    assert {q.expected for q in a} == {("Quillon", "euros")}
    assert {q.expected for q in b} == {("ends", "paid")}
    assert a[0].question == TEMPLATE.format(
        masked="[MASK_1] signed the lease in Porto. The rent is 4417 [MASK_2] monthly.")
    # with two documents a word is distinctive when only one holds it: A's are "signed" and
    # "4417" (besides the masked ones), swapped for B's ("ends", "paid", "soon"); the words
    # both hold stay where they are
    pattern = re.compile(r"\[MASK_1\] (\w+) the lease in Porto\. The rent is (\w+) \[MASK_2\] "
                         r"monthly\.")
    pairs = [pattern.fullmatch(_first_line(q.question)) for q in a[1:]]
    assert all(p is not None for p in pairs)
    swapped = [(p.group(1), p.group(2)) for p in pairs if p is not None]
    # three pairs of two out of three words, each pair its own, each word used twice
    assert len(set(swapped)) == 3 and all(x != y for x, y in swapped)
    assert sorted(w for pair in swapped for w in pair) == ["ends", "ends", "paid", "paid",
                                                           "soon", "soon"]
    # B's one distinctive word outside its masks, "soon", swapped for three of A's four
    subs = [re.fullmatch(r"The lease in Porto \[MASK_1\] (\w+)\. Rent is \[MASK_2\] monthly\.",
                         _first_line(q.question)) for q in b[1:]]
    assert all(s is not None for s in subs)
    assert len({s.group(1) for s in subs if s is not None}) == 3
    assert {s.group(1) for s in subs if s is not None} < {"Quillon", "signed", "4417", "euros"}
    # the same documents, the same queries (seeded by the documents alone)
    assert membership_questions([A], [B], attacks=["calibrated"], masks=2, perturbations=3) == qs

    # scripted answers: A's original gives both masked words, its perturbed ones 1 of 2, 0 and
    # 0; B's original gives 1 of 2, its perturbed ones 1, 1 and 2 of 2
    answers = {("a", 0): "[MASK_1]: Quillon\n[MASK_2]: euros", ("a", 1): "[MASK_1]: quillon",
               ("a", 2): "I do not know.", ("a", 3): "[MASK_1]: Porto",
               ("b", 0): "[MASK_1]: ends", ("b", 1): "[MASK_2]: paid",
               ("b", 2): "[MASK_1]: ends", ("b", 3): "ends, paid"}
    docs = {"a": A, "b": B}
    records = [score_answer(q, answers[q.document_id, q.part], docs[q.document_id]) for q in qs]
    assert [r["perturbed"] for r in records] == [False, True, True, True] * 2
    per = document_scores(records)["calibrated"]
    # A: 1 − (½ + 0 + 0)/3 = 5/6; B: ½ − (½ + ½ + 1)/3 = −1/6
    assert per["a"] == (pytest.approx(5 / 6), True)
    assert per["b"] == (pytest.approx(-1 / 6), False)
    assert membership_summary(records, **FAST)["attacks"]["calibrated"]["auc"] == 1.0


def test_registered_as_a_fourth_attack_run_only_when_named() -> None:
    assert ATTACKS[:4] == ("direct", "mask", "interrogation", "calibrated")
    assert "calibrated" not in DEFAULT_ATTACKS and PERTURBATIONS == 3
    asked = {q.attack for q in membership_questions([A], [B])}
    assert asked == {"direct", "mask", "interrogation"}
    # its cost: 1 + perturbations queries per document asked
    for n in (1, 3, 5):
        qs = membership_questions([A], [B], attacks=["calibrated"], perturbations=n)
        assert len(qs) == 2 * (1 + n)
    # each perturbation draws its own substitutes while the other documents' words last
    docs = corpus()
    qs = membership_questions(docs[:8], docs[8:], attacks=["calibrated"], perturbations=5)
    assert len({q.question for q in qs}) == len(qs) == 15 * 6
    params = MembershipParams(attacks=("direct", "calibrated"), perturbations=2)
    assert params.to_config()["perturbations"] == 2
    assert "perturbations" not in MembershipParams().to_config()  # runs without it unchanged


@pytest.mark.parametrize("bad", [0, -1, 101, 2.5, True])
def test_bad_perturbations_is_a_config_error_naming_it(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"^perturbations must be a whole number from 1 to "
                                          r"100 \(perturbed queries per document\), not") as info:
        MembershipParams(attacks=("calibrated",), perturbations=bad)
    assert info.value.param == "perturbations" and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="questions") as info:
        MembershipParams(questions=0)
    assert info.value.param == "questions"
    if isinstance(bad, int) and not isinstance(bad, bool):
        with pytest.raises(InputError, match="perturbations"):
            membership_questions([A], [B], attacks=["calibrated"], perturbations=bad)


def _audit(target: FunctionTarget, members: Sequence[AttackDocument],
           non_members: Sequence[AttackDocument], attacks: tuple[str, ...]
           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    method = MembershipMethod(params=MembershipParams(attacks=attacks, **FAST))
    return run_hooks(method, target, {"members": members, "non_members": non_members})


# the completion attack ("Generating Is Believing", test_completion.py) meets the same controls
@pytest.mark.parametrize(("docs", "attack"), [("northwind", "calibrated"),
                                              ("synthetic", "calibrated"),
                                              ("synthetic", "completion")])
def test_positive_control_auc_near_one(docs: str, attack: str) -> None:
    members, non_members = split_members(corpus() if docs == "northwind" else synthetic(60),
                                         seed=0)
    _, summary = _audit(repeater(members), members, non_members, (attack,))
    out = summary["attacks"][attack]
    assert out["auc"] >= 0.95 and out["auc_ci"]["low"] > 0.5, out["auc"]
    assert out["unasked"] == []
    if docs == "synthetic":  # 30 and 30 documents: enough to show a leak
        assert out["eps"]["eps_lower"] > 1.0


@pytest.mark.parametrize("attack", ["calibrated", "completion"])
def test_negative_control_auc_covers_a_half_and_no_bound(attack: str) -> None:
    members, non_members = split_members(synthetic(60), seed=0)
    _, summary = _audit(ignorer([*members, *non_members]), members, non_members, (attack,))
    out = summary["attacks"][attack]
    assert covers(out["auc_ci"], 0.5), out["auc_ci"]
    assert out["eps"]["eps_lower"] == 0.0 and summary["eps_lower"] == 0.0


def leaker(datastore: Sequence[AttackDocument], share: float = 0.6, seed: int = 0,
           yes: bool = False) -> FunctionTarget:
    """A target that shows, verbatim, the retrieved documents of a seeded ``share`` of its
    datastore and nothing of the others (a polite refusal instead); ``yes``: it opens every
    answer with "Yes." whatever it was asked."""
    ids = [d.id for d in datastore]
    leaked = set(random.Random(seed).sample(ids, round(share * len(ids))))
    retrieve = Overlap(datastore)

    def answer(question: str) -> str:
        shown = [d.text for d in retrieve(question) if d.id in leaked]
        text = "\n\n".join(shown) if shown else "I can only help with questions on the records."
        return f"Yes. {text}" if yes else text

    return FunctionTarget(answer, f"leaker-{share}")


def _tpr_at_1(out: dict[str, Any]) -> float:
    return float(next(e["tpr"] for e in out["tpr_at_fpr"] if e["fpr_target"] == 0.01))


@pytest.mark.parametrize("attack", ["calibrated", "completion"])
def test_on_a_target_leaking_60_percent_at_least_the_direct_question(attack: str) -> None:
    members, non_members = split_members(synthetic(120), seed=0)
    records, summary = _audit(leaker(members), members, non_members, ("direct", attack))
    direct, calibrated = summary["attacks"]["direct"], summary["attacks"][attack]
    assert _tpr_at_1(calibrated) >= _tpr_at_1(direct)
    assert _tpr_at_1(calibrated) >= 0.5  # 36 of the 60 members leak: most of them found
    # the direct question's bound by the split-half rule, at the same confidence, by the same
    # statistics (audit_scores) over its per-document scores
    scores = document_scores(records)["direct"]
    level = calibrated["eps"]["confidence"]
    split = audit_scores([s for s, _ in scores.values()], [m for _, m in scores.values()],
                         confidence=level, rule="split-half", seed=0)
    assert split["threshold_rule"] == "split-half" and split["eps_lower"] > 0
    assert calibrated["eps"]["eps_lower"] >= split["eps_lower"]
    assert calibrated["eps"]["eps_lower"] >= direct["eps"]["eps_lower"]


def test_a_target_that_says_yes_to_everything_blinds_only_the_direct_question() -> None:
    members, non_members = split_members(synthetic(60), seed=1)
    _, summary = _audit(leaker(members, yes=True), members, non_members,
                        ("direct", "calibrated"))
    direct, calibrated = summary["attacks"]["direct"], summary["attacks"]["calibrated"]
    assert direct["auc"] == 0.5 and direct["eps"]["eps_lower"] == 0.0  # every answer "yes"
    assert calibrated["auc"] >= 0.75 and calibrated["auc_ci"]["low"] > 0.5
    assert calibrated["eps"]["eps_lower"] > 0.0


def test_documents_with_nothing_to_swap_get_no_query_and_the_summary_says_why() -> None:
    # each has one word to hide and nothing else that only it holds: no perturbation possible
    ins, outs = [AttackDocument("q", "It is Quillon.")], [AttackDocument("h", "It is here.")]
    assert membership_questions(ins, outs, attacks=["calibrated"]) == []
    records, summary = _audit(repeater(ins), ins, outs, ("mask", "calibrated"))
    assert {r["attack"] for r in records} == {"mask"}
    skipped = summary["attacks"]["calibrated"]
    assert "at most half of the documents hold" in skipped["skipped"]
    assert skipped["unasked"] == ["h", "q"]
