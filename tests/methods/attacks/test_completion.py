"""The completion membership attack ("Generating Is Believing: Membership Inference Attacks
against Retrieval-Augmented Generation"), fast tier, function targets, no model: its queries and
score by hand on two documents; an answer that echoes the question scores 0; a target that
restarts the retrieved document as a small model does is found; documents with nothing to look
for are trials guessed non-members, said in the report; none asked at all: the summary says why.
The repeater, ignorer and 60 % leaker controls are test_calibrated.py's, run for both attacks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from test_calibrated import FAST, _audit
from test_extract_membership_controls import Overlap, repeater, synthetic
from test_membership import A, B  # the two documents of the mask attack's hand-made tests

from ctxleak.citations import METHOD_PAPERS
from ctxleak.errors import InputError
from ctxleak.methods.attacks.attack_method import MembershipParams
from ctxleak.methods.attacks.completion import (
    MAX_WORDS,
    completion_question,
    completion_score,
    halves,
)
from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership import (
    ATTACKS,
    DEFAULT_ATTACKS,
    document_scores,
    membership_questions,
    membership_summary,
    score_answer,
    split_members,
)
from ctxleak.methods.attacks.membership_words import document_frequency
from ctxleak.report.attacks import abstained_rows
from ctxleak.targets.base import FunctionTarget


def test_two_documents_queries_and_score_by_hand() -> None:
    assert halves("one two three four five") == ("one two", "three four five")
    assert halves("  a\n b  ") == ("a", "b")
    qs = membership_questions([A], [B], attacks=["completion"])
    # A: "Quillon signed the lease in Porto." | "The rent is 4417 euros monthly."; of its first
    # half's candidate words only Quillon and signed are in no other document (lease and Porto
    # are B's too), the longer first
    # B: "The lease in Porto ends" | "soon. Rent is paid monthly."; "ends" is B's alone
    assert [(q.document_id, q.member, q.question, q.expected) for q in qs] == [
        ("a", True, "The rent is 4417 euros monthly.", ("Quillon", "signed")),
        ("b", False, "soon. Rent is paid monthly.", ("ends",))]
    docs = {"a": A, "b": B}
    answers = {"a": "QUILLON signed the lease.", "b": "The lease in Porto is paid monthly."}
    records = [score_answer(q, answers[q.document_id], docs[q.document_id]) for q in qs]
    assert [r["correct"] for r in records] == [[True, True], [False]]
    assert [r["score"] for r in records] == [1.0, 0.0]
    # one word alone may be a guess: at least two (all where fewer are looked for) score 1
    one = score_answer(qs[0], "Quillon, I think.", A)
    assert one["correct"] == [True, False] and one["score"] == 0.0
    assert score_answer(qs[1], "It ends.", B)["score"] == 1.0
    assert [completion_score(c) for c in ([True], [False], [True, False, False],
                                          [False, True, True], [True] * 10)] == [1, 0, 0, 1, 1]
    assert document_scores(records)["completion"] == {"a": (1.0, True), "b": (0.0, False)}
    assert membership_summary(records, **FAST)["attacks"]["completion"]["auc"] == 1.0


def test_only_first_half_words_no_other_document_holds_at_most_max_words() -> None:
    # a word of the first half that the sent half repeats is not looked for: the answer could
    # echo it from the question
    doc = AttackDocument("d", "Zephyrine paid Quorvath twice. Quorvath thanked Zephyrine.")
    df = document_frequency([doc])
    q = completion_question(doc, True, df)
    # "Zephyrine paid Quorvath" | "twice. Quorvath thanked Zephyrine."
    assert q is not None and q.question == "twice. Quorvath thanked Zephyrine."
    assert q.expected == ("paid",)
    # held by another document: not looked for; nothing left: no question
    other = AttackDocument("o", "paid in full")
    assert completion_question(doc, True, document_frequency([doc, other])) is None
    long = AttackDocument("l", " ".join(f"word{chr(97 + i)}{chr(97 + j)}" for i in range(6)
                                        for j in range(4)) + " " + "filler " * 24)
    got = completion_question(long, False, document_frequency([long]))
    assert got is not None and len(got.expected) == MAX_WORDS and not got.member


def test_registered_as_a_fifth_attack_run_only_when_named_and_cited() -> None:
    assert ATTACKS == ("direct", "mask", "interrogation", "calibrated", "completion")
    assert "completion" not in DEFAULT_ATTACKS
    assert "completion" not in {q.attack for q in membership_questions([A], [B])}
    assert "li2024generating" in METHOD_PAPERS["attack-membership"]
    params = MembershipParams(attacks=("completion",))
    assert params.to_config()["attacks"] == ["completion"]


def test_an_answer_that_echoes_the_question_scores_0() -> None:
    # (the repeater, ignorer and 60 % leaker controls: test_calibrated.py, parametrized)
    members, non_members = split_members(synthetic(60), seed=0)
    echo = FunctionTarget(lambda question: f"You said: {question}", "echo")
    records, summary = _audit(echo, members, non_members, ("completion",))
    assert len(records) == 60 and {r["score"] for r in records} == {0.0}
    assert summary["attacks"]["completion"]["auc"] == 0.5
    assert summary["attacks"]["completion"]["eps"]["eps_lower"] == 0.0


def restarter(datastore: Sequence[AttackDocument], words: int = 8) -> FunctionTarget:
    """A target that starts to copy its best retrieved document from the beginning and stops
    after ``words`` words, as the bundled default model tends to."""
    retrieve = Overlap(datastore, k=1)
    return FunctionTarget(lambda question: " ".join(retrieve(question)[0].text.split()[:words]),
                          "restarter")


def test_a_target_that_restarts_the_retrieved_document_is_found() -> None:
    members, non_members = split_members(synthetic(60), seed=2)
    records, summary = _audit(restarter(members), members, non_members, ("completion",))
    completion = summary["attacks"]["completion"]
    assert completion["auc"] >= 0.95 and completion["eps"]["eps_lower"] > 1.0
    # a member's answer gives back its names and place (the first 8 of its words)
    assert all(r["score"] > 0 for r in records if r["member"])


def test_documents_with_nothing_to_look_for_get_no_query_and_the_summary_says_why() -> None:
    ins = [AttackDocument("q", "It is here. Quillon")]
    outs = [AttackDocument("h", "It is there now.")]
    assert membership_questions(ins, outs, attacks=["completion"]) == []
    records, summary = _audit(repeater(ins), ins, outs, ("mask", "completion"))
    assert {r["attack"] for r in records} == {"mask"}
    skipped = summary["attacks"]["completion"]
    assert "in its first half, held by no other document" in skipped["skipped"]
    assert skipped["unasked"] == ["h", "q"]


@pytest.mark.parametrize("bad", [["completion", "completions"], []])
def test_unknown_attack_names_the_choices(bad: list[str]) -> None:
    with pytest.raises(InputError, match="completion") as info:
        membership_questions([A], [B], attacks=bad)
    assert info.value.param == "attacks"


def test_documents_without_a_question_are_trials_guessed_non_members() -> None:
    # C's first half ("Rent is") has no word to look for: no query, score 0 as a trial
    c = AttackDocument("c", "Rent is paid in Porto.")
    qs = membership_questions([A, c], [B], attacks=["completion"])
    assert [q.document_id for q in qs] == ["a", "b"]
    records = [score_answer(qs[0], "Quillon signed", A), score_answer(qs[1], "nothing", B)]
    alone = membership_summary(records, **FAST)["attacks"]["completion"]
    assert (alone["n_members"], alone["n_non_members"], "abstained" in alone) == (1, 1, False)
    every = membership_summary(records, documents={"a": True, "b": False, "c": True},
                               **FAST)["attacks"]["completion"]
    assert (every["n_members"], every["n_non_members"], every["abstained"]) == (2, 1, 1)
    # a: 1 (2 of 2 words), c: 0, b: 0 -> a above b (1), c tied with b (½): AUC ¾
    assert every["auc"] == pytest.approx(0.75)
    # the other attacks leave documents without a question out of their ROC
    mask = membership_questions([A, c], [B], attacks=["mask"])
    mask_records = [score_answer(q, "nothing", {"a": A, "b": B, "c": c}[q.document_id])
                    for q in mask]
    got = membership_summary(mask_records, documents={"a": True, "b": False, "c": True}, **FAST)
    assert got["attacks"]["mask"]["n_members"] == len({q.document_id for q in mask if q.member})


def test_the_audit_counts_every_document_of_the_datastore() -> None:
    short = [AttackDocument(f"s{i}", f"It is {w}. Quillon{w} lives here.")
             for i, w in enumerate(["ab", "cd", "ef", "gh"])]
    members, non_members = split_members(synthetic(40), seed=0)
    ins, outs = members + short[:2], non_members + short[2:]
    records, summary = _audit(repeater(ins), ins, outs, ("completion",))
    out = summary["attacks"]["completion"]
    assert len(records) == 40 and out["abstained"] == 4
    assert (out["n_members"], out["n_non_members"]) == (22, 22)
    assert sorted(out["unasked"]) == ["s0", "s1", "s2", "s3"]
    # the report and the console say how many were asked and how many guessed
    assert abstained_rows(summary) == [{"attack": "completion", "documents asked about": 40,
                                        "guessed non-member without a question": 4}]
