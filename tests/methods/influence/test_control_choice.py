"""How the control context is chosen: another document, never the example's own.

The control of context influence scores an example's response under a context that cannot
hold its private facts. In SQuAD-style data several questions share one document, and a
retriever can return a superset of another query's passages: the control must be the nearest
example whose context is another document (not equal, neither inside the other, after NFC,
case folding and whitespace collapsing), and an example without one must say so."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

import ctxleak
from ctxleak.methods.influence.control import (
    NO_CONTROL,
    context_key,
    control_indices,
    control_summary,
)
from ctxleak.methods.influence.verdict import setting_verdict

DOC_A = "Marta Velikova joined the Berlin office. Her salary is 84,500 euros."
DOC_B = "The Lisbon office closed in March. Pedro Alves moved to Porto."


def _same_document(a: str, b: str) -> bool:
    ka, kb = context_key(a), context_key(b)
    return ka == kb or ka in kb or kb in ka


def test_squad_style_questions_never_get_their_own_document():
    """Two documents with two questions each: before, 3 of 4 examples got their own document."""
    assert control_indices([DOC_A, DOC_A, DOC_B, DOC_B]) == [2, 2, 1, 1]
    assert control_indices([DOC_A, DOC_B, DOC_B, DOC_A, DOC_A]) == [1, 0, 0, 2, 2]


def test_normalised_copies_and_supersets_are_the_same_document():
    spaced = "  marta   VELIKOVA joined the berlin office.\n Her salary is 84,500 euros. "
    assert context_key(spaced) == context_key(DOC_A)
    # re-wrapped and re-cased copies, a decomposed accent (NFD): one document, no control
    cafe_nfc, cafe_nfd = "Caf\u00e9 Lumen pays Ana 3,000.", "Cafe\u0301 Lumen pays Ana 3,000."
    assert control_indices([DOC_A, spaced]) == [None, None]
    assert control_indices([cafe_nfc, cafe_nfd]) == [None, None]
    # a retrieval that holds another's passages and more is not a control for it, nor it for
    # the superset
    superset = DOC_A + "\n\n" + DOC_B
    assert control_indices([DOC_A, superset]) == [None, None]
    assert control_indices([DOC_A, superset, DOC_B]) == [2, None, 0]
    assert control_indices([DOC_A, superset, "An unrelated memo."]) == [2, 2, 1]


@given(st.lists(st.sampled_from(["a b", "c d", "a b c d", "e", "A  B", "f g"]), max_size=12))
def test_a_control_is_another_document_and_exists_whenever_one_does(contexts):
    controls = control_indices(contexts)
    for k, c in enumerate(controls):
        others = [j for j in range(len(contexts)) if not _same_document(contexts[k],
                                                                        contexts[j])]
        if c is None:
            assert others == []
        else:
            assert c in others
            earlier = [j for j in others if j < k]
            # the nearest earlier other document, else the nearest later one
            assert c == (max(earlier) if earlier else min(others))


@given(st.lists(st.sampled_from(["a b", "c d", "a b c d", "e"]), min_size=1, max_size=10),
       st.integers(0, 10))
def test_an_example_keeps_its_control_when_a_resumed_run_asks_for_more(contexts, cut):
    """--limit grows: a control found among fewer examples is the same among more."""
    short = control_indices(contexts[:cut])
    full = control_indices(contexts)
    for k, c in enumerate(short):
        if c is not None:
            assert full[k] == c


def test_one_document_many_questions_is_searched_once():
    """10,000 questions on one document then another: linear, each gets the other document."""
    n = 10_000
    controls = control_indices([DOC_A] * n + [DOC_B])
    assert controls[:n] == [n] * n and controls[n] == n - 1


def test_summary_and_verdict_name_the_examples_without_a_control():
    def rec(i, influence, control):
        return {"id": i, "influence": influence, "control_id": "x" if control else None,
                "control_influence": control, "response_ids": [1, 2],
                "influence_above_control": None if control is None else influence - control,
                "influence_above_control_per_token": None}
    records = [rec("q1", 30.0, 5.0), rec("q2", 4.0, 6.0), rec("q3", 35.0, None)]
    c = control_summary(records)
    assert c["enabled"] and c["n"] == 2 and c["without_control"] == ["q3"]
    # 2 examples with a control: too few for a flag to mean anything, so none is made
    assert c["without_control_reason"] == NO_CONTROL and c["flagged"] == []
    assert c["largest_above"] == {"id": "q1", "label": "q1", "nats": 25.0}
    v = setting_verdict({"n": 3, "influence": {"mean": 23.0}, "control": c})
    assert v["text"].startswith("Too few examples to tell")  # 2 with a control
    assert "1 more (q3) have no control" in v["text"]
    none = control_summary([rec("q1", 3.0, None), rec("q2", 4.0, None)])
    assert not none["enabled"] and "one document" in none["reason"]
    assert none["without_control"] == ["q1", "q2"]


def test_squad_like_run_scores_each_question_against_the_other_document(llama_lm, tmp_path):
    """The reported case end to end: 2 documents x 2 questions, each control is the other
    document, so influence above control is not 0 by construction."""
    rows = [{"id": f"{d}-{q}", "context": ctx, "query": query}
            for d, ctx in (("hr", DOC_A), ("ops", DOC_B))
            for q, query in enumerate(("Who is named?", "Which city?"))]
    res = ctxleak.influence(llama_lm, rows, max_new_tokens=4, min_new_tokens=0, seed=1,
                            progress=False, output=str(tmp_path / "run"))
    by_id = {r["id"]: r for r in res.records}
    assert {i: r["control_id"] for i, r in by_id.items()} == {
        "hr-0": "ops-0", "hr-1": "ops-0", "ops-0": "hr-1", "ops-1": "hr-1"}
    for r in res.records:
        assert r["control_influence"] != r["influence"]
    assert res.summary["settings"][0]["control"]["without_control"] == []


def test_invisible_and_compatibility_twins_are_the_same_document():
    """Zero-width spaces, soft hyphens, bidi isolates and full-width digits do not make a
    context another document (the one normal text of ctxleak.normal_text)."""
    twin = ("Marta Velik\u00adova joined the Ber\u200blin office. \u2066Her\u2069 salary is "
            "\uff18\uff14,500 euros.")
    assert context_key(twin) == context_key(DOC_A)
    assert control_indices([DOC_A, twin]) == [None, None]
