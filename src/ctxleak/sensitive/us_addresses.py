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
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Any

import pyap.source_US.data as us
import regex

__all__ = ["STREET_WORDS", "street_cues", "us_address_matches", "with_cue_before"]


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
