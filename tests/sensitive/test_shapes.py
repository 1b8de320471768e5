"""The detectors on the shapes issues 84 and 85 name: an IBAN whatever follows it, seven-digit
and national phone numbers, Spanish DNI/NIE with their control letter, CJK names, PINs and keys
spelled out; and text in other code points (NFD, zero-width and format characters) read as the
plain text, spans mapped back to the text as given."""

from __future__ import annotations

import unicodedata

import pytest

from ctxleak.normal_text import is_invisible, normal_text, normal_view
from ctxleak.report.redaction import REDACTED, redact_text
from ctxleak.report.value_matcher import ValueMatcher
from ctxleak.sensitive import carried_values, find_sensitive, value_in
from ctxleak.sensitive.european import find_ibans, iban_spans
from ctxleak.sensitive.national import (
    find_cjk_names,
    find_local_phones,
    find_national_phones,
    find_spaced_secrets,
)

IBAN = "DE89 3704 0044 0532 0130 00"


def found(text: str) -> set[tuple[str, str]]:
    return {(s.type, s.text) for s in find_sensitive(text)}


# --------------------------------------------------------------------------- normal text

def test_normal_text_by_hand() -> None:
    assert normal_text("cafe\u0301") == "café"
    assert normal_text("\ufb01le \uff11\uff12") == "file 12"  # ligature, full-width digits
    assert normal_text("pass\u00adword\u200b \u202eab\u202c\ufeff\ufe0f") == "password ab"
    assert normal_text("plain ascii") == "plain ascii"
    assert all(is_invisible(c) for c in "\u200b\u200c\u200d\u2060\u00ad\u202a\u2066\ufeff\ufe0f")
    assert not any(is_invisible(c) for c in "a é 1\n\t")


def test_normal_view_maps_spans_back_over_the_invisible_characters() -> None:
    text = "x \u200bA\u200bB\u0301C y"
    view = normal_view(text)
    assert view.text == "x AB\u0301C y".replace("B\u0301", unicodedata.normalize("NFC", "B\u0301"))
    a, b = view.span(2, 6)  # "ABC" with the accent (no B with an acute is precomposed)
    assert text[a:b] == "A\u200bB\u0301C"
    # Hangul jamo parted by a zero-width space compose into one syllable
    assert normal_view("\u1100\u200b\u1161\u11a8").text == "\uac01"


def test_a_value_in_other_code_points_is_found_where_it_stands() -> None:
    text = "mail d\u200bana@\u200bexample.org or call +1 (415) 555\u200b-0142 now"
    spans = {s.type: s for s in find_sensitive(text)}
    assert spans["email"].text == "d\u200bana@\u200bexample.org"
    assert text[spans["email"].start:spans["email"].end] == spans["email"].text
    assert "\u200b" in spans["phone"].text
    assert carried_values(text)["dana@example.org"] == "email"


def test_value_in_reads_both_sides_in_normal_text() -> None:
    hidden = "\u200b".join(unicodedata.normalize("NFD", "Tr0ub4dor&3x for José"))
    assert value_in("Tr0ub4dor&3x", "password", hidden)
    assert value_in("José", "person", hidden)
    assert value_in(IBAN, "id", f"iban {'‌'.join(IBAN)}")


def test_value_matcher_finds_values_between_zero_width_characters() -> None:
    text = "key s\u200bk-\u2060live\u00ad-4f9a2b and more"
    spans = ValueMatcher(["sk-live-4f9a2b"]).spans(text)
    assert [text[a:b] for a, b in spans] == ["s\u200bk-\u2060live\u00ad-4f9a2b"]


# --------------------------------------------------------------------------- IBAN

@pytest.mark.parametrize("after", [" as instructed", " AS INSTRUCTED", " OK", " by Friday.", "",
                                   ", thanks", " 42 times"])
def test_an_iban_is_found_whatever_follows_it(after: str) -> None:
    text = f"IBAN {IBAN}{after}"
    assert [s.text for s in find_ibans(text)] == [IBAN]
    assert value_in(IBAN, "id", f"Send it to {IBAN}{after.lower()}")


def test_an_iban_with_a_wrong_check_is_not_one() -> None:
    assert iban_spans("IBAN DE88 3704 0044 0532 0130 00 as instructed") == []
    assert not value_in(IBAN, "id", "IBAN DE89 3704 0044 0532 0130 01 as instructed")


# --------------------------------------------------------------------------- phones

@pytest.mark.parametrize("number", ["555-0142", "555 0142", "555.0142"])
def test_seven_digit_numbers_with_a_separator(number: str) -> None:
    assert [s.text for s in find_local_phones(f"Call {number} tomorrow")] == [number]
    assert ("phone", number) in found(f"Call {number} tomorrow.")


@pytest.mark.parametrize("text", ["5550142", "1555-0142", "555-01423", "2024-0142",
                                  "555 0142 7788", "12 555 0142", "v1.555-0142"])
def test_seven_digits_inside_longer_runs_are_no_local_number(text: str) -> None:
    assert find_local_phones(text) == []


@pytest.mark.parametrize("number", ["0151 23456789", "030 1234567", "612 345 678",
                                    "090-1234-5678", "010-1234-5678", "06 12 34 56 78"])
def test_national_numbers_of_other_countries(number: str) -> None:
    assert [s.text for s in find_national_phones(f"Tel. {number}, bitte.")] == [number]


def test_a_run_that_no_plan_validates_is_no_national_number() -> None:
    assert find_national_phones("order 123 456 789 and 000 0000000") == []


# --------------------------------------------------------------------------- ids, names, keys

def test_spanish_dni_and_nie_by_their_control_letter() -> None:
    got = found("DNI 12345678Z y NIE X1234567L del titular")
    assert {("id", "12345678Z"), ("id", "X1234567L")} <= got
    # 12345678 mod 23 = 14 -> Z; A is the wrong letter
    assert not any(t == "12345678A" for _, t in found("DNI 12345678A del titular"))


@pytest.mark.parametrize("text,name", [
    ("担当: 山田太郎様 電話", "山田太郎"), ("田中 花子さんへ", "田中 花子"),
    ("연락처: 김민준 씨에게", "김민준"), ("이서연님 안녕하세요", "이서연"),
    ("name: 佐藤 花子", "佐藤 花子"), ("氏名：鈴木一郎", "鈴木一郎"), ("이름: 박지훈", "박지훈"),
])
def test_cjk_names_after_a_cue(text: str, name: str) -> None:
    assert name in [s.text for s in find_cjk_names(text)]


def test_korean_roles_before_an_honorific_are_no_name() -> None:
    assert find_cjk_names("고객님 감사합니다, 선생님") == []


@pytest.mark.parametrize("spaced", ["s k - l i v e - 4 f 9 a 2 b 7 c 1 d 8 e 3 f 6 a 0 b 5 c",
                                    "A K I A 1 2 3 4 5 6 7 8 9 0 A B C D E F"])
def test_a_key_spelled_out_is_found_whole(spaced: str) -> None:
    assert [s.text for s in find_spaced_secrets(f"the key is {spaced} ok")] == [spaced]


def test_spelled_out_digits_or_words_are_no_key() -> None:
    assert find_spaced_secrets("1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7") == []
    assert find_spaced_secrets("S O S and a b c") == []


# --------------------------------------------------------------------------- --redact

@pytest.mark.parametrize("text,value", [
    (f"Pay IBAN {IBAN} as instructed.", IBAN),
    ("Call 555-0142 today.", "555-0142"),
    ("Llámame al +34 612 345 678 mañana.", "612 345 678"),
    ("Handy 0151 23456789 oder 030 1234567.", "0151 23456789"),
    ("Handy 0151 23456789 oder 030 1234567.", "030 1234567"),
    ("DNI 12345678Z del titular.", "12345678Z"),
    ("NIE X1234567L del titular.", "X1234567L"),
    ("担当: 山田太郎様 090-1234-5678", "山田太郎"),
    ("担当: 山田太郎様 090-1234-5678", "090-1234-5678"),
    ("연락처: 김민준 씨 010-1234-5678", "김민준"),
    ("연락처: 김민준 씨 010-1234-5678", "010-1234-5678"),
    ("The PIN 4821 opens it.", "4821"),
    ("PIN: 0000 for the side door.", "0000"),
    ("key: s k - l i v e - 4 f 9 a 2 b 7 c 1 d 8 e 3 f 6 a 0 b 5 c", "4 f 9 a"),
    ("A K I A 1 2 3 4 5 6 7 8 9 0 A B C D E F is the key", "A K I A"),
])
def test_redact_masks_every_shape(text: str, value: str) -> None:
    out = redact_text(text)
    assert value not in out and REDACTED in out
