"""The sentence splitter of passages (:func:`split_context`, Def. 3.1 of "Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models" with S = one sentence) keeps
abbreviations and initials with their sentence, and its pieces always rebuild the text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxleak.methods.rag.passages import split_context


@pytest.mark.parametrize("text, sentences", [
    ("Dr. Lena Wirth. She is here.", ["Dr. Lena Wirth.", "She is here."]),
    ("I read J. R. R. Tolkien. Then slept.", ["I read J. R. R. Tolkien.", "Then slept."]),
    ("Take one, e.g. this one. Fine.", ["Take one, e.g. this one.", "Fine."]),
    ("Mr. A and Mrs. B met Ms. Cole. Prof. D left.", ["Mr. A and Mrs. B met Ms. Cole.",
                                                      "Prof. D left."]),
    ("She lives at No. 5 Elm St. in Leeds. Hi.", ["She lives at No. 5 Elm St. in Leeds.",
                                                  "Hi."]),
    ("He moved to the U.S. in May. Good.", ["He moved to the U.S. in May.", "Good."]),
    ("I said no. No. I said it.", ["I said no.", "No.", "I said it."]),
    ("Stop! Why? Go.", ["Stop!", "Why?", "Go."]),
])
def test_abbreviations_and_initials_stay_with_their_sentence(text, sentences):
    pieces = split_context(text, "sentence")
    assert "".join(pieces) == text
    assert [p.strip() for p in pieces] == sentences


ALPHABET = st.sampled_from(list("abAB .!?\n\t") + ["Dr.", "No.", "U.S.", "J.", "e.g.", " 5"])


@given(st.lists(ALPHABET, max_size=40).map("".join), st.sampled_from(["sentence", "paragraph"]))
def test_pieces_always_concatenate_to_the_text(text, mode):
    pieces = split_context(text, mode)
    assert "".join(pieces) == text
    assert all(pieces)


def test_a_lower_case_text_still_splits_at_each_period():
    text = "the capital of france is paris . rome is in italy ."
    assert [p.strip() for p in split_context(text, "sentence")] == [
        "the capital of france is paris .", "rome is in italy ."]
