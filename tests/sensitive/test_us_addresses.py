"""US addresses: pyap2 reads only near a state or ZIP code with a street word before it, and
its grammar run with a set look-up of street types finds exactly what pyap2 finds."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pyap
import pytest

from ctxleak.sensitive import detect
from ctxleak.sensitive.detect import find_addresses, find_pii
from ctxleak.sensitive.us_addresses import STREET_WORDS, street_cues, us_address_matches, with_cue_before

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
