"""An API key found and masked in whatever a server echoes, in any of the forms it may take:
plain, JSON-escaped, URL-encoded, reversed, hex-encoded, 8 of its characters in a row, and
each of these with JSON ``\\uXXXX`` escapes for some or all of its characters or with
characters that show as nothing (zero-width, soft hyphens, bidirectional controls:
:func:`ctxleak.normal_text.is_invisible`) between them.

The text is searched in a *decoded view* (each ``\\uXXXX`` escape read as its character, each
invisible character left out) and every find mapped back to the characters of the text it
spans, so only the key is replaced: the escapes around it (a ``\\u0022`` inside a JSON
string) stay as they are, and the text stays valid JSON where it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from urllib.parse import quote

from ctxleak.normal_text import is_invisible

__all__ = ["KEY_PART", "SPACER", "decoded_view", "key_forms", "key_pattern", "key_spans", "mask_key",
           "mask_spelled", "replace_spans"]

#: The fewest characters of the API key masked where a server echoes a part of it.
KEY_PART = 8
_ESCAPE_RE = re.compile(r"\\u([0-9a-fA-F]{4})")
#: What may stand between two characters of a key spelled out: whitespace and ASCII
#: punctuation, at most this many characters.
SPACER = r"[\s!-/:-@\[-`{-~]{0,8}"


def key_forms(api_key: str | None) -> list[str]:
    """The API key as a server may echo it (plain, JSON-escaped, URL-encoded, reversed,
    hex-encoded in lower or upper case), longest first, then every run of :data:`KEY_PART` of
    its characters, forwards and reversed (a key split over lines or fields)."""
    if not api_key:
        return []
    raw = api_key.encode()
    whole = {api_key, json.dumps(api_key)[1:-1], quote(api_key, safe=""), api_key[::-1],
             raw.hex(), raw.hex().upper()}
    parts = {api_key[i:i + KEY_PART] for i in range(len(api_key) - KEY_PART + 1)} \
        if len(api_key) > KEY_PART else set()
    parts |= {p[::-1] for p in parts}
    return sorted(whole, key=len, reverse=True) + sorted(parts - whole)


def _escape(match: re.Match[str]) -> str | None:
    point = int(match.group(1), 16)  # a surrogate stays escaped: alone it cannot be printed
    return None if 0xD800 <= point <= 0xDFFF else chr(point)


def _read_escapes(text: str) -> tuple[str, list[int], list[int]]:
    """One level of JSON string escapes read (``\\uXXXX`` and ``\\\\``), invisible characters
    left out, with each character's span in ``text``."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        char, width = text[i], 1
        if char == "\\":
            m = _ESCAPE_RE.match(text, i)
            read = _escape(m) if m else None
            if read is not None:
                char, width = read, 6
            elif text.startswith("\\\\", i):
                width = 2
        if not is_invisible(char):
            chars.append(char)
            starts.append(i)
            ends.append(i + width)
        i += width
    return "".join(chars), starts, ends


def decoded_view(text: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` with its JSON escapes read (``\\uXXXX``, twice over: a key escaped in a text
    that is itself a JSON string) and its invisible characters left out, and for each character
    of that view the start and end of what it came from in ``text``; None where the text holds
    neither (the view is the text)."""
    if "\\u" not in text and not any(is_invisible(c) for c in text if not c.isascii()):
        return None
    once, starts, ends = _read_escapes(text)
    if "\\u" not in once:
        return once, starts, ends
    twice, starts2, ends2 = _read_escapes(once)
    return twice, [starts[a] for a in starts2], [ends[b - 1] for b in ends2]


def key_spans(text: str, find: Callable[[str], list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """What ``find`` finds in ``text`` and in its :func:`decoded_view`, as spans of ``text``."""
    spans = find(text)
    view = decoded_view(text)
    if view is not None:
        seen, starts, ends = view
        spans += [(starts[a], ends[b - 1]) for a, b in find(seen) if b > a]
    return spans


def _found(forms: Sequence[str]) -> Callable[[str], list[tuple[int, int]]]:
    def find(text: str) -> list[tuple[int, int]]:
        out = []
        for form in forms:
            at = text.find(form)
            while at >= 0:
                out.append((at, at + len(form)))
                at = text.find(form, at + len(form))
        return out

    return find


def replace_spans(text: str, spans: Sequence[tuple[int, int]], mask: str) -> str:
    """``text`` with each of ``spans`` (overlapping ones merged) replaced by ``mask``."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    out, pos = [], 0
    for a, b in merged:
        out += [text[pos:a], mask]
        pos = b
    out.append(text[pos:])
    return "".join(out)


def mask_key(text: str, forms: Sequence[str], mask: str = "***") -> str:
    """``text`` with every form of a key (:func:`key_forms`), ``\\u``-escaped or not, with
    invisible characters between its characters or not, as ``mask``: what the served client
    and the privacy proxy do to whatever a server echoes."""
    if not forms or not text:
        return text
    spans = key_spans(text, _found(forms))
    return replace_spans(text, spans, mask) if spans else text


def key_pattern(key: str) -> re.Pattern[str]:
    """Every form of ``key`` (:func:`key_forms`) and its letters and digits, forwards and
    reversed, with up to 8 spaces or punctuation marks between each two (spelled out)."""
    forms = [re.escape(f) for f in key_forms(key)]
    letters = [c for c in key if c.isalnum()]  # its punctuation may be spelled otherwise
    if len(letters) >= KEY_PART:
        forms[:0] = [SPACER.join(re.escape(c) for c in letters),
                     SPACER.join(re.escape(c) for c in reversed(letters))]
    return re.compile("|".join(forms))


def mask_spelled(text: str, pattern: re.Pattern[str], mask: str) -> str:
    """``text`` with every match of ``pattern`` (:func:`key_pattern`), in the text or in its
    :func:`decoded_view`, as ``mask``."""
    spans = key_spans(text, lambda t: [m.span() for m in pattern.finditer(t) if m.end() > m.start()])
    return replace_spans(text, spans, mask) if spans else text
