"""Answer utility against references (SQuAD's exact match and token F1, beside ROUGE-L), the
paired difference of two settings, reference lists, and the bundled ``demo-qa`` set, whose
answers are short spans of their own private document ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models" measures what a mitigation costs in utility)."""

from __future__ import annotations

import json

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.data import DEMO_SETS, load_examples
from ctxleak.methods.tradeoff.utility import (
    exact_match,
    normalize_answer,
    paired_difference,
    reference_scores,
    token_f1,
)


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # an article only as a whole word
    assert normalize_answer("48,200 pounds.") == "48200 pounds"


def test_exact_match_by_hand():
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel Tower in Paris", "Eiffel tower") == 0.0


@pytest.mark.parametrize("prediction, reference, f1", [
    ("red big apple", "big red car", 2 / 3),      # 2 shared of 3 and 3: P = R = 2/3
    ("x x x", "x", 0.5),                          # multisets: 1 shared, P = 1/3, R = 1
    ("x x y", "x y y", 2 / 3),                    # min(2,1) + min(1,2) = 2 shared of 3 and 3
    ("Gideon Faraway, the therapist", "Gideon Faraway", 2 * (2 / 3) / (2 / 3 + 1)),
    ("The.", "the", 0.0),                         # normalises to nothing: 0 (SQuAD v1.1)
    ("", "anything", 0.0),
    ("Trondheim", "Trondheim", 1.0),
])
def test_token_f1_by_hand(prediction, reference, f1):
    assert token_f1(prediction, reference) == pytest.approx(f1)


def test_scores_take_the_best_reference_and_none_without_one():
    got = reference_scores("a peanut allergy", ["peanuts", "peanut"])
    assert got["exact_match"] == 0.0
    assert got["f1"] == pytest.approx(2 * 0.5 * 1 / 1.5)  # "peanut allergy" vs "peanut"
    assert reference_scores("peanuts", ["peanut", "peanuts"])["exact_match"] == 1.0
    assert reference_scores("anything", []) == {"rouge_l": None, "exact_match": None, "f1": None,
                                                "match": None}
    assert reference_scores("anything", [""])["f1"] is None
    assert got["match"] == 1.0  # "peanut" appears in "a peanut allergy" as a word


def test_answer_match_is_the_reference_as_whole_words_in_the_answer():
    from ctxleak.methods.tradeoff.utility import answer_match

    said = "Yusuf Abernathy-Kole's new annual salary will be 44,750 pounds."
    assert answer_match(said, "44,750 pounds") == 1.0  # exact match scores this 0
    assert reference_scores(said, ["44,750 pounds"])["exact_match"] == 0.0
    assert answer_match("The room is Saltmarshes.", "Saltmarsh") == 0.0  # not a whole word
    assert answer_match("it is the Saltmarsh room", "The Saltmarsh") == 1.0  # articles dropped
    assert answer_match("anything", "the") == 0.0  # normalises to nothing: no match


def test_paired_difference_pairs_by_id_and_gives_a_bootstrap_interval():
    right = [{"id": f"e{i}", "f1": 0.0} for i in range(12)]
    left = [{"id": f"e{i}", "f1": 1.0 if i % 2 else 0.5} for i in reversed(range(12))]
    left.append({"id": "only-left", "f1": 1.0})  # not paired
    got = paired_difference(left, right, "f1")
    assert got["pairs"] == 12
    assert got["mean_difference"] == pytest.approx(0.75)
    assert got["ci_low"] <= 0.75 <= got["ci_high"] and got["ci_low"] > 0
    assert got["excludes_zero"] is True
    few = paired_difference(left[:5], right, "f1")
    assert few["pairs"] == 5 and few["ci_low"] is None and "n = 5" in few["ci_reason"]
    assert few["excludes_zero"] is None
    same = paired_difference(right, right, "f1")
    assert (same["mean_difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    assert same["excludes_zero"] is False


def test_a_reference_list_is_read_and_a_bad_one_names_its_line(tmp_path):
    good = tmp_path / "qa.jsonl"
    good.write_text(json.dumps({"context": "c", "query": "q?", "reference": ["a", "b"]}) + "\n")
    ex = load_examples(str(good))[0]
    assert (ex.reference, ex.all_references) == ("a", ("a", "b"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"context": "c", "query": "q?"}) + "\n"
                   + json.dumps({"context": "c", "query": "q?", "reference": ["a", 3]}) + "\n")
    with pytest.raises(InputError) as err:
        load_examples(str(bad))
    assert err.value.field == "reference" and err.value.line == 2


def test_demo_qa_answers_are_short_spans_of_their_own_document_only():
    examples = load_examples("demo-qa")
    assert len(examples) == 24 and set(DEMO_SETS) >= {"demo", "demo-qa"}
    assert len({ex.id for ex in examples}) == 24
    for ex in examples:
        assert ex.task == "qa" and ex.query.endswith("?")
        assert ex.all_references, ex.id
        assert any(r.lower() in ex.context.lower() for r in ex.all_references), ex.id
        assert all(len(r.split()) <= 3 for r in ex.all_references), ex.id
        others = [o.context.lower() for o in examples if o.id != ex.id]
        assert not any(ex.reference.lower() in o for o in others), ex.id  # only its own
        assert ex.reference.lower() not in ex.query.lower(), ex.id  # not given away


def test_a_run_records_utility_and_its_summary_averages_it(llama_lm, tmp_path):
    rows = [{"id": "a", "context": "rome is the capital of italy .", "query": "capital ?",
             "reference": ["rome", "the city of rome"]},
            {"id": "b", "context": "berlin is in germany .", "query": "where ?",
             "reference": "germany"},
            {"id": "c", "context": "the doctor said one page .", "query": "who ?"}]
    result = ctxleak.influence(llama_lm, rows, max_new_tokens=4, min_new_tokens=0,
                               progress=False, output=str(tmp_path / "run"))
    by_id = {r["id"]: r for r in result.records}
    for rid, refs in (("a", ["rome", "the city of rome"]), ("b", ["germany"])):
        want = reference_scores(by_id[rid]["response"], refs)
        assert {k: by_id[rid][k] for k in want} == pytest.approx(want)
    assert by_id["c"]["f1"] is None and by_id["c"]["exact_match"] is None
    setting = result.summary["settings"][0]
    assert setting["f1"]["n"] == 2
    assert setting["f1"]["mean"] == pytest.approx((by_id["a"]["f1"] + by_id["b"]["f1"]) / 2)
    assert setting["exact_match"]["n"] == 2
    loaded = ctxleak.load_result(str(tmp_path / "run"))  # the checks accept the new fields
    assert loaded.summary["settings"][0]["f1"] == setting["f1"]
