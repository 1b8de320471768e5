"""The membership attacks' questions and scores ("Is My Data in Your Retrieval Database?";
"Mask-based Membership Inference Attacks for Retrieval-Augmented Generation"; "Riddle Me
This!"): masks and questions built by hand, verdicts read by hand, the per-document score as
the mean of its queries, the seeded split, and bad input."""

from __future__ import annotations

import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership import (
    MASK_TEMPLATE,
    check_membership,
    direct_verdict,
    document_frequency,
    document_scores,
    given,
    interrogation_questions,
    mask_question,
    membership_questions,
    membership_summary,
    score_answer,
    split_members,
)

A = AttackDocument("a", "Quillon signed the lease in Porto. The rent is 4417 euros monthly.")
B = AttackDocument("b", "The lease in Porto ends soon. Rent is paid monthly.")


def test_mask_question_masks_the_rarest_words_by_hand() -> None:
    df = document_frequency([A, B])
    # words once in A and rare in the corpus: "quillon", "signed", "4417", "euros" (df 1);
    # "lease", "porto", "rent", "monthly" are in B too (df 2); longer words first among equals
    # "signed" is next to "Quillon": the second mask moves on to "euros"
    q = mask_question(A, True, df, 2)
    assert q is not None and q.expected == ("Quillon", "euros")
    masked = "[MASK_1] signed the lease in Porto. The rent is 4417 [MASK_2] monthly."
    assert q.question == MASK_TEMPLATE.format(masked=masked)
    # a third: "4417" and "monthly" touch "euros"; "lease" is the first of the df-2 words
    q3 = mask_question(A, True, df, 3)
    assert q3 is not None and q3.expected == ("Quillon", "lease", "euros")


def test_mask_positions_by_hand() -> None:
    doc = AttackDocument("m", "alpha bravo charlie delta")
    df = {"alpha": 1, "bravo": 1, "charlie": 2, "delta": 3}
    q = mask_question(doc, False, df, 2)
    # alpha and bravo are the rarest, but side by side: alpha then charlie (df 2)
    assert q is not None and q.expected == ("alpha", "charlie")
    assert q.question.startswith("[MASK_1] bravo [MASK_2] delta\n\n")


def test_interrogation_asks_what_in_place_of_the_rarest_word() -> None:
    df = document_frequency([A, B])
    qs = interrogation_questions(A, True, df, 5)
    assert [q.expected for q in qs] == [("Quillon",), ("euros",)]
    assert qs[0].question == "According to your documents, what signed the lease in Porto?"
    assert qs[1].question == "According to your documents, The rent is 4417 what monthly?"
    assert len(interrogation_questions(A, True, df, 1)) == 1


def test_scores_by_hand() -> None:
    assert direct_verdict("Yes, it is.", A) == ("yes", 1.0)
    assert direct_verdict("no.", A) == ("no", 0.0)
    assert direct_verdict("I cannot say; there is no way to know.", A) == ("none", 0.5)
    long = AttackDocument("l", " ".join(f"w{i}" for i in range(30)))
    assert direct_verdict("Here: " + long.text, long) == ("shown", 1.0)
    assert given(["Quillon", "4417", "euros"], "It was quillon, for 4417 EUR.") == [True, True,
                                                                                    False]
    q = membership_questions([A], [B], attacks=["mask"], masks=4)[0]
    rec = score_answer(q, "[MASK_1]: Quillon\n[MASK_2]: wrote", A)
    assert rec["correct"][0] and sum(rec["correct"]) == 1
    assert rec["score"] == pytest.approx(1 / len(q.expected))


def test_document_score_is_the_mean_of_its_queries() -> None:
    records = [{"attack": "interrogation", "document_id": "a", "member": True, "score": 1.0},
               {"attack": "interrogation", "document_id": "a", "member": True, "score": 0.0},
               {"attack": "interrogation", "document_id": "a", "member": True, "score": 1.0},
               {"attack": "interrogation", "document_id": "b", "member": False, "score": 0.0},
               {"attack": "direct", "document_id": "a", "member": True, "score": 0.5}]
    per = document_scores(records)
    assert per["interrogation"] == {"a": (pytest.approx(2 / 3), True), "b": (0.0, False)}
    assert per["direct"] == {"a": (0.5, True)}
    out = membership_summary(records)
    assert out["attacks"]["interrogation"]["auc"] == 1.0
    assert "skipped" in out["attacks"]["direct"] and out["best"] == "interrogation"


def test_split_is_seeded_and_leaves_both_sides() -> None:
    docs = [f"document number {i} about topic {i * 7}" for i in range(10)]
    ins, outs = split_members(docs, seed=3)
    assert (len(ins), len(outs)) == (5, 5)
    assert split_members(docs, seed=3) == (ins, outs)
    assert split_members(docs, seed=4) != (ins, outs)
    assert len(split_members(docs[:2], held_out=0.9)[0]) == 1


@pytest.mark.parametrize(("members", "non_members", "words"), [
    ([A], [], "non-members"),
    ([], [B], "members"),
    ([A], [A], "id 'a'"),
    ([A], [AttackDocument("c", A.text)], "same text"),
    ([A, A], [B], "id 'a'"),
])
def test_bad_membership_input(members: list[AttackDocument], non_members: list[AttackDocument],
                              words: str) -> None:
    with pytest.raises(InputError, match=words):
        check_membership(members, non_members)
    with pytest.raises(InputError):
        membership_questions(members, non_members)


def test_bad_options() -> None:
    with pytest.raises(InputError, match="unknown attack 'guess'"):
        membership_questions([A], [B], attacks=["guess"])
    with pytest.raises(InputError, match="masks"):
        membership_questions([A], [B], masks=0)
    with pytest.raises(ConfigError, match=r"held_out must be in \(0, 1\), got 1"):
        split_members([A, B], held_out=1.0)  # a parameter's domain: a ConfigError since issue 84
    with pytest.raises(ConfigError, match="held_out must be a number, got True"):
        split_members([A, B], held_out=True)
    with pytest.raises(InputError, match="at least 2"):
        split_members([A])


def test_a_document_without_candidate_words_gets_no_question() -> None:
    bare = AttackDocument("bare", "It is so. He is on it.")
    df = document_frequency([A, bare])
    assert mask_question(bare, False, df, 5) is None
    assert interrogation_questions(bare, False, df, 3) == []
    asked = {(q.attack, q.document_id) for q in membership_questions([A], [bare])}
    assert asked == {("direct", "a"), ("direct", "bare"), ("mask", "a"), ("interrogation", "a")}
