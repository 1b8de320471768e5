"""What every detector of :mod:`ctxleak.sensitive` returns (:class:`Span`), the union of
spans, and the e-mail pattern the detectors of names and contact details share."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ctxleak.normal_text import normal_view

# Every quantifier in the patterns of this package is bounded ({0,n}, never * or +), so each
# pattern does a bounded amount of work at each position of a text: linear in its length
# (tests/sensitive/test_linear.py checks it).
_LOCAL_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,64}"
_DOMAIN_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL_RE = re.compile(
    rf"(?<![A-Za-z0-9!#$%&'*+/=?^_`{{|}}~.@-])"
    rf"{_LOCAL_ATOM}(?:\.{_LOCAL_ATOM}){{0,16}}"
    rf"@(?:{_DOMAIN_LABEL}\.){{1,8}}[A-Za-z]{{2,63}}"
    rf"(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)


@dataclass(frozen=True)
class Span:
    """A piece of PII found in a text: ``text == source[start:end]``. ``score`` is a fixed
    confidence by detector (1.0 e-mail, 0.95 validated phone, 0.9 address with a postal code,
    0.6 address without one)."""

    type: str
    start: int
    end: int
    text: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "start": self.start, "end": self.end, "text": self.text,
                "score": self.score}


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sorted union of ``[start, end)`` spans: overlapping or touching ones become one,
    empty ones are dropped."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        elif b > a:
            merged.append((a, b))
    return merged


def on_normal(find: Callable[..., list[Span]], text: str, *args: Any, **kwargs: Any
              ) -> list[Span]:
    """``find(normal, ...)`` on :func:`ctxleak.normal_text.normal_view` of ``text`` (NFKC,
    invisible characters removed: what every detector reads), its spans mapped back to
    ``text`` (a zero-width character inside a find is inside its span)."""
    view = normal_view(text)
    found = find(view.text, *args, **kwargs)
    if view.unchanged:
        return found
    out = []
    for s in found:
        a, b = view.span(s.start, s.end)
        out.append(Span(s.type, a, b, text[a:b], s.score))
    return out


__all__ = ["EMAIL_RE", "Span", "merge_spans", "on_normal"]
