"""US addresses: pyap2 reads only near a state or ZIP code with a street word before it, and
its grammar run with a set look-up of street types finds exactly what pyap2 finds."""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pyap
import pyap.source_US.data as us
import pytest

from ctxleak.sensitive import detect
from ctxleak.sensitive.detect import find_addresses, find_pii
from ctxleak.sensitive.us_addresses import (
    CITY_TAIL,
    STREET_WORDS,
    city_ranges,
    intersect,
    street_cues,
    us_address_matches,
    with_cue_before,
)

_WORDS = ["12", "4", "1600", "One", "N", "NW", "Main", "Oak", "Park", "St", "St.", "Street",
          "Ave", "Blvd", "Bay", "Cut", "Off", "Rd", ",", "Springfield", "Bay City", "IL", "CA",
          "MI", "62701", "94043", "48706-1234", "Suite", "2", "Apt", "PO", "Box", "Route", "66",
          "Broadway", "USA", "Ct", "Cts", "Court", "Ln", "Highway", "I-95", "the", "Via",
          "Camino", "Real", "Fl", "Dr", "W", "3rd", "Promenade", "Hwy", "CA 12", "Drawer"]


def test_the_same_matches_as_pyap2() -> None:
    rng = random.Random(84)
    found = 0
    for _ in range(1500):
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 24)))
        text = detect._normalize_with_offsets(text)[0]  # " , " -> ", " as pyap2 does
        theirs = [(int(a.match_start), int(a.match_end), a.postal_code or None)
                  for a in pyap.parse(text, country="US")]
        assert us_address_matches(text) == theirs, text
        found += len(theirs)
    assert found > 300  # the sentences hold addresses, not only near misses


def test_street_words() -> None:
    assert {"st", "avenue", "blvd", "via", "broadway", "route", "box", "n", "sw"} <= STREET_WORDS
    text = "12 Main St, Springfield. Northwest of here, CA 12 and CA 94043; Plaza"
    words = [text[i:i + 4] for i in street_cues(text)]
    # St, Northwest, the highway "CA 12" (not "CA 94043": five digits), Plaza
    assert words == ["St, ", "Nort", "CA 1", "Plaz"]
    assert street_cues("94043 CA 94043 DE12 3456 12345 Main") == []


def test_an_anchor_needs_a_street_word_before_it() -> None:
    cues = [10, 500]
    assert with_cue_before([(5, 7), (12, 14), (300, 302), (420, 422), (501, 503)], cues,
                           400) == [(12, 14), (300, 302), (501, 503)]
    # a cue 400 characters before the anchor is near enough, 401 too far; one at the anchor
    # is not before it
    assert with_cue_before([(410, 412)], cues, 400) == [(410, 412)]
    assert with_cue_before([(411, 413)], cues, 400) == []
    assert with_cue_before([(500, 502)], [500], 400) == []


@pytest.fixture
def pyap_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    seen: list[int] = []
    real = detect.us_address_matches

    def record(text: str) -> Any:
        seen.append(len(text))
        return real(text)
    monkeypatch.setattr(detect, "us_address_matches", record)
    yield seen


@pytest.mark.parametrize("unit", ["94043 CA ", "DE12 3456 ", "12345 Main ", "IN OR ME PA "])
def test_states_and_zip_codes_without_a_street_are_not_read(pyap_reads: list[int],
                                                             unit: str) -> None:
    assert find_pii(unit * 2000) == []
    assert pyap_reads == []


@pytest.mark.parametrize("unit", ["1 N CA ", "1 E IN ", "CA 12 ", "Box 1 CA 94043 ", "N 12 CA "])
def test_street_words_and_states_without_a_city_are_not_read(pyap_reads: list[int],
                                                               unit: str) -> None:
    # every word a street word or a state, but no city: a number ends every run of letters
    assert [s for s in find_pii(unit * 2000) if s.type == "address"] == []
    assert pyap_reads == []


def test_an_address_in_such_text_is_still_found(pyap_reads: list[int]) -> None:
    address = "1600 Pennsylvania Ave NW, Washington, DC 20500"
    text = ("94043 CA " * 1000 + f"and so on.\nThe office has moved: write to {address} soon. "
            + "DE12 3456 " * 1000)
    assert [s.text for s in find_pii(text) if s.type == "address"] == [address]
    # read near the address only (of 19,100 characters): from 300 characters before its first
    # state to 80 after the last state ("DE") within 400 of its street words
    assert 0 < sum(pyap_reads) <= 300 + 400 + 80 + len(address)


@pytest.mark.parametrize("address", [
    "14 Alder Road, Springfield, IL 62704", "PO Box 1234, Austin, TX 78701",
    "500 Broadway, New York, NY 10012", "77 Route 9, Albany, New York 12205",
    "9 W Maple Dr, Boise, ID 83702"])
def test_us_addresses_in_prose(address: str) -> None:
    text = f"The notice went out on Monday; please write to {address} for the forms."
    assert [s.text for s in find_addresses(text)] == [address]


def test_a_city_and_a_region_after_it() -> None:
    # "Oak St, S" (as pyap2's city may be), "Springfield, IL"; no city before CA in "1 N CA 1 N"
    # (a number breaks it) nor before 94043 in "Box 1 CA 94043" (two letters)
    text = "x" * 500 + " 12 Oak St, Springfield, IL 62704 " + "1 N CA " * 100
    [(start, end)] = city_ranges(text, 300)
    assert start == 504 - 300
    assert 530 + CITY_TAIL - 20 < end <= 530 + CITY_TAIL
    for unit in ["1 N CA ", "1 E IN ", "Box 1 CA 94043 ", "CA 12 ", "94043 CA "]:
        assert city_ranges(unit * 50, 300) == []
    assert city_ranges("9 W Maple Dr, Boise ID 83702", 5) != []
    assert city_ranges("1 Main St, NY 10001", 5) != []
    # runs of spaces and commas are one character of pyap2's text
    assert city_ranges("1 Main St, Reno" + " " * 50 + ",  , NV", 5) != []
    assert intersect([(0, 10), (20, 30)], [(5, 25), (28, 40)]) == [(5, 10), (20, 25), (28, 30)]


def test_the_tail_bound_is_pyap2s() -> None:
    """From a city's start to an address's end pyap2's grammar reads at most 142 characters."""
    try:
        from re import _parser as parser  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse as parser
    tail = rf"{us.city}{us.region1_postal_code}(?:{us.part_div} {us.make_country('z')})?"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parser.parse(tail, re.VERBOSE).getwidth()[1] + 40 <= CITY_TAIL


_REAL = ["1600 Pennsylvania Ave NW, Washington, DC 20500", "14 Alder Road, Springfield, IL 62704",
         "PO Box 1234, Austin, TX 78701", "500 Broadway, New York, NY 10012",
         "77 Route 9, Albany, New York 12205", "9 W Maple Dr, Boise, ID 83702",
         "350 Fifth Avenue, Suite 3300, New York, NY 10118", "One Infinite Loop, Cupertino, CA"]
#: addresses whose city is the only one near (a two- or three-letter city, a ZIP code after
#: the city or after ``-``, a `` - `` divider), for texts of shapes with no city
_LONE = ["PO Box 12, Rye 10580", "PO Box 7, NY 10001", "PO Box 7 Ayr - NE 68818",
         "PO Box 7, Ayr-68818", "12 Highway 9, N.Y. 10001", "PO Box 3, Lee, MA 01238"]
_FILLER = ["1 N CA ", "1 E IN ", "CA 12 ", "Box 1 CA 94043 ", "12 St CA 94043 ", "94043 CA ",
           "The review went well. ", "Please write to us at ", "or call on Monday. "]


def test_the_gated_finder_finds_what_pyap2_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """find_addresses, which hands pyap2 only the text near a city with a state or ZIP code
    after it and a street word before, finds in texts of address words, real addresses, prose
    and dense shapes what pyap.parse finds reading each text whole."""
    rng = random.Random(8484)
    texts = []
    for _ in range(300):
        parts = [rng.choice(_FILLER) * rng.randint(1, 12) for _ in range(rng.randint(0, 3))]
        parts.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 24))))
        parts += [rng.choice(_REAL) + rng.choice([". ", ", ", " "])] * rng.randint(0, 1)
        rng.shuffle(parts)
        texts.append("".join(parts))
    for lone in _LONE:
        for unit in ["1 N CA ", "CA 12 ", "1 E IN ", "Box 1 CA 94043 ", "12 "]:
            texts.append(unit * 60 + lone + " " + unit * 20)
    gated = [[(s.start, s.end) for s in find_addresses(t)] for t in texts]

    def whole(text: str) -> Any:
        return [(int(a.match_start), int(a.match_end), a.postal_code or None)
                for a in pyap.parse(text, country="US")]
    monkeypatch.setattr(detect, "_pyap_regions", lambda masked, country: [(0, len(masked))])
    monkeypatch.setattr(detect, "us_address_matches", whole)
    plain = [[(s.start, s.end) for s in find_addresses(t)] for t in texts]
    assert gated == plain
    assert sum(map(len, plain)) > 100
