"""The one detector of copied text (methods/text_match.py), used by words for context extraction
("The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented Generation") and by
characters for what an answer copied: units, echoes and spans counted by hand in both units, the
quoted-question rule at its 40-character edge, and bad configurations."""

from __future__ import annotations

import pytest

from ctxleak.errors import ConfigError
from ctxleak.methods.text_match import QUOTED, TextMatch, values_beyond, verbatim_spans, words

W = TextMatch("words", echo=3, least=4)
C = TextMatch("characters", echo=3, least=4)
# 40 characters of whole words, and 39
GATE, HUT = "north gate keys hang behind the red door", "north gate keys hang behind the red hut"
DOC = f"Memo: {GATE} of the lodge."
ANSWER = "The north gate keys hang behind the red door, it says."


def test_units_by_hand() -> None:
    assert words("Base-pay: 142,000! It's 9.5.") == ["base-pay", "142,000", "it's", "9.5"]
    assert W.units("A b, C") == ("a", "b", "c")
    assert C.units("  A\tB \n c ") == "a b c"


def test_echo_by_hand_in_both_units() -> None:
    assert W.echoed(["a", "b", "c", "d"], ["x", "b", "c", "d"]) == [False, True, True, True]
    assert W.echoed(["a", "b", "c"], ["a", "b"]) == [False, False, False]  # under 3 words
    # characters: "abc" (at 1) and "bcd" (at 2) are the question's 3-grams, "xab" and "cdy"
    # are not: a..d echoed, x and y not
    assert C.echoed("xabcdy", "abcd") == [False, True, True, True, True, False]
    assert W.without_echo("A b c d", "b c d") == "a" and C.without_echo("ABCD", "bcd") == "a"
    assert W.without_echo("A  b", "x y z") == "A  b"  # nothing echoed: the text as it was


def test_longest_span_by_hand_in_both_units() -> None:
    assert W.longest_span("a b c d", "x b c d y") == 3
    assert W.longest_span("a b a b c", "a b c") == 3
    assert W.longest_span("a b", "c d") == 0 and W.longest_span("", "a") == 0
    assert C.longest_span("abcd", "xbcdy") == 3 and C.longest_span("ab", "cd") == 0
    # the echo of "b c d" lies inside the run a..e but does not count in its length
    assert W.longest_span("a b c d e", "a b c d e", "b c d") == 2
    assert C.longest_span("abcde", "abcde", "bcd") == 2


def test_beyond_question_by_hand_in_both_units() -> None:
    # "c d e" echoed: the runs outside it are "a b" and "f g h", 3 words, under least = 4
    assert not W.beyond_question("a b c d e f g h", "c d e")
    assert W.beyond_question("a b c d e f g h", "x y z")
    assert W.beyond_question("a b c d e f g h i", "c d e")  # "f g h i": 4
    assert not C.beyond_question("abcdefgh", "cde") and C.beyond_question("abcdefghi", "cde")


def test_a_question_quoting_40_characters_excuses_nothing_in_either_unit() -> None:
    quoting, fewer = f"Where do {GATE}?", f"Where do {GATE[6:]}?"  # 40 and 34 characters
    assert len(GATE) == QUOTED == 40 and verbatim_spans(DOC, quoting, 1)[-1] == GATE
    for unit in (W, C):
        assert unit.asked(DOC, quoting) == "" and unit.asked(DOC, fewer) == fewer
    hut_doc = f"Memo: {HUT} of the lodge."  # 39 characters quoted: still a question
    assert W.asked(hut_doc, f"Where do {HUT}?") == f"Where do {HUT}?"
    words_, chars = TextMatch("words", 3, 20), TextMatch("characters", 10, 20)
    # words: the answer shares "north gate keys hang behind the red door" (8 words) with the
    # document; the 34-character question gave the last 7 of them, which do not count
    assert words_.longest_span(ANSWER, DOC, words_.asked(DOC, quoting)) == 8
    assert words_.longest_span(ANSWER, DOC, words_.asked(DOC, fewer)) == 1
    # characters: the shared run is " north gate keys hang behind the red door" (41); the
    # question gave " gate keys hang behind the red door" (35), leaving " north" (6)
    assert chars.longest_span(ANSWER, DOC, chars.asked(DOC, quoting)) == 41
    assert chars.longest_span(ANSWER, DOC, chars.asked(DOC, fewer)) == 6
    (span,) = verbatim_spans(DOC, ANSWER, 20)
    assert span == GATE
    assert chars.beyond_question(span, chars.asked(DOC, quoting))
    assert not chars.beyond_question(span, chars.asked(DOC, fewer))  # "north" alone: 5


def test_values_beyond_the_question() -> None:
    values = [("jane.doe@example.com", "email"), ("4417", "pin")]
    answer = "Write to JANE.DOE@example.com, code 4417."
    assert values_beyond(values, answer, "") == values
    assert values_beyond(values, answer, "Is jane.doe@example.com hers?") == [("4417", "pin")]
    assert values_beyond(values, "No idea.", "") == []


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"unit": "tokens"}, "unit"), ({"unit": "Words"}, "unit"), ({"echo": 0}, "echo"),
    ({"least": -1}, "least"), ({"quoted": 2.5}, "quoted"), ({"echo": True}, "echo"),
])
def test_bad_configuration_names_the_parameter(kwargs: dict[str, object], param: str) -> None:
    config: dict[str, object] = {"unit": "words", "echo": 3, "least": 20, **kwargs}
    with pytest.raises(ConfigError, match=param) as err:
        TextMatch(**config)  # type: ignore[arg-type]
    assert err.value.param == param
    if param == "unit":
        assert "'words' or 'characters'" in str(err.value)


def test_without_the_quoted_rule_a_question_always_excuses_its_echo() -> None:
    """``quoted=None`` (extraction's anchors): a question quoting the whole document still
    excuses what it gave, in words (9 shared, 9 echoed) and in characters."""
    doc = "base pay for the whole of the coming year"
    words_rule = TextMatch("words", echo=3, least=5, quoted=None)
    assert words_rule.asked(doc, doc) == doc
    assert words_rule.longest_span(doc, doc, words_rule.asked(doc, doc)) == 0
    assert words_rule.longest_span(doc, doc) == 9  # nothing asked
    assert TextMatch("words", echo=3, least=5).asked(doc, doc) == ""  # the rule on: nothing
