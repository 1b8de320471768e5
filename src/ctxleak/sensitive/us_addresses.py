"""US addresses by pyap2's grammar, read only where one can be and matched with a set look-up.

pyap2's patterns take up to about 0.2 ms a character where states, ZIP codes and street
numbers are dense (``94043 CA 94043 CA ...``, ``CA 12 CA 12 ...``) against 0.01 ms on prose:
at each street number they try each of 3 to 41 characters of street name against an
alternation of 561 street types. Two things bound that here, neither changing what is found:

- *Street words.* Every US address pyap2's grammar accepts has a street line before its state
  or ZIP code, and every street line holds one of these words: a street type (pyap2's list:
  ``St``, ``Avenue``, ``Blvd``, ... and its leading types ``Via``, ``Camino``, ``Rue``), a
  street named without a type (``Broadway``, ``Highway 12``, ``Route 66``, ``State Road 7``,
  ``I-95``, ``Interstate 5``, a state's highway ``CA 12``), a direction (``N``, ``NW``,
  ``North``, ``Southwest``) or a post-office box (``PO Box``, ``PMB``, ``Drawer``). Only a
  state or ZIP code with one of them before it is read (:func:`with_cue_before`); the words
  are found in one pass, each looked up in a set.
- *One grammar, a faster engine.* :func:`us_address_matches` runs pyap2's own US pattern with
  the ``regex`` module, its street-type alternation replaced by a named list (a hash look-up of
  the same words, case-insensitive as pyap2's ``[Ss][Tt]`` classes are): the same matches,
  4 to 5 times faster on such text.
- *A city, then a state or a ZIP code.* Every address pyap2 finds ends in a city followed by a
  state, a country or a ZIP code (``full_address``: ``... {city}{region1_postal_code}``).
  :func:`city_ranges` finds, in one pass, every place where a city may start with one of
  those after it (pyap2's ``city``, loosened to read the text before pyap2's own
  normalisation) and keeps only the text around them: a number, a direction and a state
  repeated (``1 N CA 1 N CA``) holds street words and states but no city, and is not read.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Any

import pyap.source_US.data as us
import regex

__all__ = ["CITY_TAIL", "STREET_WORDS", "city_ranges", "intersect", "street_cues",
           "us_address_matches", "with_cue_before"]


def _first_word(entry: str) -> str:
    """The first run of letters of one of pyap2's list entries (``Black\\ Hou?rse`` -> black)."""
    match = re.match(r"[A-Za-z]{1,40}", entry)
    return match.group(0).lower() if match else ""


#: lower-case words, one of which every US street line holds
STREET_WORDS: frozenset[str] = frozenset(
    {_first_word(w) for w in (*us.street_type_list, *us.street_type_leading_list,
                               *us.single_street_name_list, *us.terminating_street_type_list)}
    | {"highway", "hwy", "route", "alt", "alternate", "state", "interstate", "i",
       "n", "s", "e", "w", "ne", "nw", "se", "sw",
       "box", "bx", "pmb", "p", "po", "post", "drawer"}
) - {""}
#: a direction written as one word: ``North``, ``Southwest`` (pyap2's ``{1,2}``)
_DIRECTION = re.compile(r"(?:north|south|east|west){1,2}")
#: a state's numbered highway (``CA 12``: a state's letters, a space, at most four digits)
_STATES = frozenset(a.lower() for a in us.STATE_ABBRS) | {"as", "gu", "mp", "pr", "vi", "dc"}
_WORD = re.compile(r"[A-Za-z]{1,40}")
_HIGHWAY_NUMBER = re.compile(r" \d{1,4}(?!\d)")


def street_cues(text: str) -> list[int]:
    """The start of every street word in ``text``, in order (one pass, a set look-up each)."""
    cues = []
    for m in _WORD.finditer(text):
        word = m.group(0).lower()
        if (word in STREET_WORDS or _DIRECTION.fullmatch(word)
                or (word in _STATES and _HIGHWAY_NUMBER.match(text, m.end()))):
            cues.append(m.start())
    return cues


def with_cue_before(anchors: list[tuple[int, int]], cues: list[int], before: int
                    ) -> list[tuple[int, int]]:
    """The anchors (start, end) with a cue starting before the anchor, at most ``before``
    characters before it: only those can end an address pyap2 finds."""
    kept = []
    for start, end in anchors:
        i = bisect.bisect_left(cues, start - before)
        if i < len(cues) and cues[i] < start:
            kept.append((start, end))
    return kept


#: dashes pyap2 reads as ``-`` (its normalisation replaces them)
_DASH = "\\-\u2010-\u2015"
#: where a city may start that a state, a country or a ZIP code follows: pyap2's ``city`` (a
#: letter and 3 to 20 of letters, spaces, ``-``, ``'`` and ``.``; ``NY``, ``N.Y.``; three
#: letters), then its ``part_div`` (``[,\s]{1,3}`` or `` - ``) and a letter (a state or a
#: country), or at most a ``part_div`` or ``-`` and a ZIP code's five digits. Read before
#: pyap2's normalisation, which makes each run of spaces one and each run of commas and spaces
#: ``, ``: here a run of spaces is one character of the city and a run of spaces and commas one
#: divider, each read once (possessive). A superset of where pyap2 finds a city and a region.
_CITY_BEFORE_REGION = regex.compile(
    rf"(?:[A-Za-z](?:[A-Za-z'.{_DASH}]| ++){{3,20}}|[Nn]\.?[Yy]\.?|[A-Za-z]{{3}})"
    rf"(?:(?:[,\s]++| ++[{_DASH}] ++)[A-Za-z]|(?:[,\s]++| ++[{_DASH}] ++|[{_DASH}])?\d{{5}})")
#: the most characters of pyap2's text from a city's start to an address's end (its ``city``,
#: ``region1_postal_code`` and country: 142, ``tests/sensitive/test_us_addresses.py`` checks
#: it) and the 40 its look-aheads read past the end
CITY_TAIL = 142 + 40
#: at most ``CITY_TAIL`` characters of pyap2's text, each run of spaces, tabs and commas one
#: (pyap2's normalisation makes each run one or two characters): where its look ends
_TAIL = regex.compile(rf"(?:[^ \t,]|[ \t,]++){{0,{CITY_TAIL}}}")


def _tail_end(text: str, pos: int) -> int:
    """Where :data:`CITY_TAIL` characters of pyap2's text from ``pos`` end in ``text``."""
    match = _TAIL.match(text, pos)
    return match.end() if match else pos


def city_ranges(text: str, before: int) -> list[tuple[int, int]]:
    """The parts of ``text`` an address pyap2 finds can lie in, merged: from ``before``
    characters before a city that a state, a country or a ZIP code follows to
    :data:`CITY_TAIL` characters of pyap2's text after it.

    One pass: each match takes the longest city it can, and a city starting inside a match
    (``pringfield, IL`` inside ``Springfield, IL``) ends its address no later than
    :data:`CITY_TAIL` after the match's end, so the range of the match covers it."""
    ranges: list[tuple[int, int]] = []
    last = 0  # the end of the open range's last match (its tail read when the range closes)
    for m in _CITY_BEFORE_REGION.finditer(text):
        start = max(0, m.start() - before)
        if not ranges or start > last and start > (end := _tail_end(text, last)):
            if ranges:
                ranges[-1] = (ranges[-1][0], end)
            ranges.append((start, start))
        last = m.end()
    if ranges:
        ranges[-1] = (ranges[-1][0], _tail_end(text, last))
    return ranges


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts two sorted lists of disjoint ``[start, end)`` ranges have in common."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@functools.cache
def _us_pattern() -> Any:
    """pyap2's US address pattern, its street types a named list (compiled once, 0.2 s)."""
    plain = [t for t in us.street_type_list if re.fullmatch(r"[A-Za-z]{1,40}", t)]
    special = [t for t in us.street_type_list if t not in plain]  # Bay(?!\ [1-9]), Cut\ Off
    types = (r"\b(?:(?i:\L<street_types>)|" + us.str_list_to_upper_lower_regex(special)
             + r")\b\.?")
    pattern = us.full_address.replace(us.street_types_re, types)
    if pattern == us.full_address:  # a pyap2 whose pattern is built otherwise: use it as is
        return regex.compile(us.full_address, regex.VERBOSE | regex.VERSION0)
    return regex.compile(pattern, regex.VERBOSE | regex.VERSION0, street_types=plain)


def us_address_matches(text: str) -> list[tuple[int, int, str | None]]:
    """What ``pyap.parse(text, country="US")`` finds in a text pyap2 has nothing to normalise
    in (no runs of spaces, no spaced commas, no dashes but ``-``): (start, end, postal code)."""
    return [(m.start(), m.end(), m.group("postal_code") or None)
            for m in _us_pattern().finditer(text)]
