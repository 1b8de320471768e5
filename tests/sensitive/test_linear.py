"""Detection stays linear in a text's length (the reliability issue's adversarial texts), checked
by construction, never by a clock: every hand-written pattern bounds its quantifiers, and no
engine (Presidio with spaCy, detect-secrets, phonenumbers' matcher, pyap2) is handed more than a
window; a value across a window's edge is found once, whole. Then the values the attacks issue
named: a phone number with digits after it, an IBAN, a German street address."""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import phonenumbers
import pyap
import pytest

import ctxleak.normal_text as normal_text
import ctxleak.sensitive as sensitive
from ctxleak.sensitive import (
    amounts,
    detect,
    european,
    find_sensitive,
    names,
    national,
    presidio,
    secrets,
    value_in,
    values,
)
from ctxleak.sensitive import (
    span as span_module,
)
from ctxleak.sensitive.detect import Span, find_phones, is_iban, keep_disjoint
from ctxleak.sensitive.windows import MARGIN, find_windowed, longest_window, windows

if sys.version_info >= (3, 11):
    from re import _constants as sre_constants
    from re import _parser as sre_parse
else:
    import sre_constants
    import sre_parse

#: the reliability issue's shapes, as bench/bench_detectors.py --adversarial times them
_SHAPES = {s["name"]: s for s in json.loads(
    (Path(__file__).resolve().parents[2] / "bench/data/adversarial_shapes.json").read_text())}


def _shape(name: str, n: int) -> str:
    s = _SHAPES[name]
    return s["prefix"] + s["unit"] * (max(0, n - len(s["prefix"]) - len(s["suffix"]))
                                      // len(s["unit"])) + s["suffix"]


# --------------------------------------------------------------------------- patterns

def _patterns(obj: Any) -> Iterator[re.Pattern[str]]:
    if isinstance(obj, re.Pattern):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _patterns(item)


def _hand_written() -> list[tuple[str, re.Pattern[str]]]:
    found = []
    for module in (sensitive, detect, values, presidio, secrets, span_module, names, amounts,
                   european, national, normal_text):
        for name, obj in vars(module).items():
            if name == "_PYAP_ANCHORS":  # pyap2's own patterns, read in windows
                continue
            found += [(f"{module.__name__}.{name}", p) for p in _patterns(obj)]
    found += [(f"presidio._CUES[{entity}]", re.compile(p))
              for entity, cues in presidio._CUES.items() for p in cues]
    return found


def _unbounded(tree: Any) -> list[str]:
    """The unbounded repeats (``*``, ``+``, ``{n,}``) anywhere in a parsed pattern."""
    repeats = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}
    if hasattr(sre_constants, "POSSESSIVE_REPEAT"):
        repeats.add(sre_constants.POSSESSIVE_REPEAT)
    out: list[str] = []
    for op, av in tree:
        if op in repeats:
            if av[1] == sre_constants.MAXREPEAT:
                out.append(str(av[2])[:80])
            out += _unbounded(av[2])
        elif op == sre_constants.SUBPATTERN:
            out += _unbounded(av[-1])
        elif op == sre_constants.BRANCH:
            for branch in av[1]:
                out += _unbounded(branch)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            out += _unbounded(av[1])
        elif op == sre_constants.GROUPREF_EXISTS:
            out += _unbounded(av[1]) + (_unbounded(av[2]) if av[2] else [])
    return out


def test_every_hand_written_pattern_bounds_its_quantifiers() -> None:
    """A pattern whose every repeat is bounded does bounded work at each position: linear in the
    text's length, whatever the text (no ``*`` or ``+`` that a long run of digits, spaces or
    words can make it retry from every position)."""
    found = _hand_written()
    assert len(found) > 25  # the collector sees the package's patterns
    bad = {name: _unbounded(sre_parse.parse(p.pattern, p.flags)) for name, p in found}
    assert {name: reps for name, reps in bad.items() if reps} == {}


def test_pyap_normalisation_is_pyaps_own() -> None:
    """The linear rewrite of pyap's normalisation gives what pyap's own does (offsets into the
    text depend on it)."""
    from pyap.parser import AddressParser

    rng = random.Random(7)
    texts = ["a ,b", "a, ,b", "x ,  , y", "  ,", ",,", " \t, \t,\tz", "1 2  3   4",
             " " * 300 + "a", " " * 50 + "," + " " * 50, "a\u2013b \u2014 c"]
    texts += ["".join(rng.choice(" \t,a1-\u2013\n") for _ in range(rng.randint(0, 60)))
              for _ in range(300)]
    for text in texts:
        norm, starts, ends = detect._normalize_with_offsets(text)
        assert norm == AddressParser._normalize_string(text), repr(text)
        assert len(starts) == len(ends) == len(norm)


def test_keep_disjoint_is_the_greedy_rule() -> None:
    rng = random.Random(3)
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 30)):
            a = rng.randint(0, 60)
            b = a + rng.randint(0, 8)
            spans.append(Span(rng.choice(["email", "phone", "address"]), a, b, "", 1.0))

        def key(s: Span) -> tuple[int, int, int]:
            return (detect._PRIORITY[s.type], -(s.end - s.start), s.start)
        naive: list[Span] = []
        for span in sorted(spans, key=key):
            if all(span.end <= k.start or span.start >= k.end for k in naive):
                naive.append(span)
        assert keep_disjoint(spans, key) == sorted(naive, key=lambda s: (s.start, s.end))


# --------------------------------------------------------------------------- windows

@pytest.mark.parametrize("n", [0, 5, 1400, 1401, 2500, 10_000, 33_333])
@pytest.mark.parametrize("shape", ["digits", "digit and space", "spaces, then a letter", "words"])
def test_windows_own_every_character_once_and_stay_small(n: int, shape: str) -> None:
    text = ("lorem ipsum dolor\n" * n)[:n] if shape == "words" else _shape(shape, n)
    ws = windows(text)
    assert ws[0].own_start == 0 and ws[-1].own_end == len(text)
    for w, nxt in zip(ws, ws[1:]):
        assert w.own_end == nxt.own_start
    for w in ws:
        assert 0 <= w.start <= w.own_start < w.own_end <= w.end <= len(text) or len(text) == 0
        assert w.end - w.start <= longest_window()
        # a value of up to MARGIN characters starting in its part, and its cue, are inside
        assert w.start <= max(0, w.own_start - MARGIN)
        assert w.end >= min(len(text), w.own_end + MARGIN)


def test_a_value_across_a_cut_is_found_once_whole() -> None:
    value = "ID 55-44 33-22 11"
    rx = re.compile(r"ID(?: \d\d-\d\d){2} \d\d")

    def finder(part: str) -> list[Span]:
        return [Span("id", m.start(), m.end(), m.group(0), 1.0) for m in rx.finditer(part)]

    filler = "lorem ipsum dolor sit amet " * 200
    for offset in range(900, 1010, 3):  # the first cut is near 1,000
        text = filler[:offset] + " " + value + " " + filler
        found = find_windowed(finder, text)
        assert [(s.start, s.text) for s in found] == [(offset + 1, value)], offset
    # and many, every one once
    text = (filler[:37] + " " + value + " ") * 300
    assert len(find_windowed(finder, text)) == 300


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """The engines replaced by recorders of how many characters each is handed (they find
    nothing, so that a long text takes no engine time)."""
    seen: dict[str, list[int]] = {"presidio": [], "detect-secrets": [], "phonenumbers": [],
                                  "pyap": []}

    def engine(name: str, result: Any = ()) -> Any:
        def record(text: str, *args: Any, **kwargs: Any) -> Any:
            seen[name].append(len(text))
            return list(result)
        return record

    monkeypatch.setattr(presidio, "find_presidio", engine("presidio"))
    monkeypatch.setattr(secrets, "find_secrets", engine("detect-secrets"))
    monkeypatch.setattr(phonenumbers, "PhoneNumberMatcher", engine("phonenumbers"))
    monkeypatch.setattr(pyap, "parse", engine("pyap"))
    monkeypatch.setattr(detect, "us_address_matches", engine("pyap"))
    sensitive._find.cache_clear()
    yield seen
    sensitive._find.cache_clear()


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_no_engine_is_handed_more_than_a_window(recorded: dict[str, list[int]],
                                               shape: str) -> None:
    text = _shape(shape, 40_000)
    find_sensitive(text + " Springfield, IL 62704 and 10 Downing Street, London SW1A 2AA")
    assert recorded["presidio"] and recorded["phonenumbers"]
    for engine, lengths in recorded.items():
        if engine != "pyap":  # pyap2's windows own more (its time is linear in their length)
            assert max(lengths, default=0) <= longest_window(), engine
    assert max(recorded["pyap"], default=0) <= longest_window(
        detect._PYAP_SIZE, detect._PYAP_MARGIN)
    # every character read a bounded number of times: the cost is linear
    assert sum(recorded["presidio"]) <= 2 * len(text)


def test_pyap_reads_only_near_a_state_postcode_or_province(
        recorded: dict[str, list[int]]) -> None:
    find_sensitive("1 " * 20_000)  # a table of digits: no address can end anywhere in it
    assert recorded["pyap"] == []


# --------------------------------------------------------------------------- values

def _found(text: str) -> dict[str, str]:
    return {s.text: s.type for s in find_sensitive(text)}


def test_values_across_a_window_edge_are_found_once() -> None:
    filler = "The quarterly report is due at the end of the month. " * 60
    for value, kind, sentence in [
            ("+49 171 5550 2291", "phone", "Call Jonas at {} today."),
            ("Lindenstraße 14, 10969 Berlin", "address", "Visit us at {} next week."),
            ("Tr0ub4dor&3x", "password", "The VPN password is {} for now.")]:
        i = sentence.index("{}")
        # the first cut falls inside the value or between its cue and it
        start = 1000 - i - len(value) // 2
        text = filler[:start] + sentence.replace("{}", value) + filler
        cut = windows(text)[0].own_end
        at = text.index(value)
        assert at - 20 < cut < at + len(value), (value, at, cut)
        found = [s for s in find_sensitive(text) if s.type == kind]
        assert [s.text for s in found] == [value], value


def test_phone_find_stops_at_the_number() -> None:
    text = "Phone: +49 171 5550 2291 3 times a day, or +49 171 5550 2291 12 May."
    phones = [s.text for s in find_sensitive(text) if s.type == "phone"]
    assert phones == ["+49 171 5550 2291", "+49 171 5550 2291"]
    assert [s.text for s in find_phones("Call +49 171 5550 2291 3 times.")] == [
        "+49 171 5550 2291"]
    # an answer that copies the number verbatim, other digits next to it
    for answer in ["Sure: +49 171 5550 2291 10969 Berlin", "+49 171 5550 2291 3 times",
                   "call 0171 5550 2291", "(+49) 171-5550-2291."]:
        assert value_in("+49 171 5550 2291", "phone", answer), answer
    assert not value_in("+49 171 5550 2291", "phone", "+49 171 5550 2292 10969")
    assert not value_in("+49 171 5550 2291", "phone", "+49 171 5550 22913")


IBAN = "DE89 3704 0044 0532 0130 00"


def test_iban_with_its_checksum() -> None:
    assert is_iban(IBAN) and is_iban(IBAN.replace(" ", "")) and is_iban("GB82 WEST 1234 5698 7654 32")
    assert not is_iban("DE88 3704 0044 0532 0130 00") and not is_iban("DE89 3704")
    assert _found(f"Transfer it to {IBAN} by Friday.").get(IBAN) == "id"
    assert _found("Transfer it to DE89370400440532013000 by Friday.").get(
        "DE89370400440532013000") == "id"
    bad = "DE88 3704 0044 0532 0130 00"
    assert not any(bad[:9] in v for v in _found(f"Transfer it to {bad} by Friday."))
    assert value_in(IBAN, "id", "the IBAN is DE89370400440532013000.")
    assert not value_in(IBAN, "id", "the IBAN is DE89370400440532013001.")


@pytest.mark.parametrize("address", [
    "Lindenstraße 14, 10969 Berlin", "Karl-Marx-Allee 90a, 10243 Berlin",
    "Berliner Straße 12\n60311 Frankfurt am Main", "Am Markt 5, 04109 Leipzig",
    "Hauptstr. 3-5, 69117 Heidelberg"])
def test_german_street_address(address: str) -> None:
    assert _found(f"Please write to {address}. Thanks!").get(address) == "address"
    assert [s.text for s in detect.find_german_addresses(f"at {address}.")] == [address]


def test_german_address_needs_a_number_and_a_postcode() -> None:
    assert detect.find_german_addresses("We met on Lindenstraße last week in Berlin.") == []
    assert detect.find_german_addresses("Lindenstraße 14 in Berlin") == []
    assert detect.find_german_addresses("Chapter 14, 10969 Copies") == []
