"""Values compared across the ways they are written: money, dates, numbers, phone numbers.

An answer that repeats a document's salary as ``142,000 USD`` where the document wrote
``$142,000`` has repeated it; so has one that writes ``2026-06-14`` for ``14 June 2026``. Each
value is read into a normal form (an amount and its currency, a calendar day, a number, the
digits of a phone number) and compared with every value of the same kind in the answer.

These readers are hand-written: Presidio and detect-secrets find values but do not compare them,
and no package on the registry here reads amounts with their currency written before or after
(``$``, ``USD``, ``dollars``) together with dates in words and in digits, both ways round.
Secrets, PINs, ids and door codes (``4417-B``) are compared exactly, as whole tokens.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from ctxleak.normal_text import normal_text
from ctxleak.sensitive.european import iban_spans, is_iban

__all__ = ["money_values", "date_values", "number_values", "value_in"]

_CURRENCY = {
    "$": "USD", "usd": "USD", "us$": "USD", "dollar": "USD", "dollars": "USD",
    "€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "£": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP", "sterling": "GBP",
    "¥": "JPY", "jpy": "JPY", "yen": "JPY", "chf": "CHF", "francs": "CHF",
    "cad": "CAD", "c$": "CAD", "aud": "AUD", "a$": "AUD", "inr": "INR", "₹": "INR",
    "rupees": "INR",
}
_CUR_WORD = (r"(?:US\$|C\$|A\$|[$€£¥₹]|\b(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR)\b)")
_CUR_AFTER = (r"(?:\b(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|dollars?|euros?|pounds?(?: sterling)?|"
              r"yen|francs|rupees)\b)")
# A number: digits with thousands separators (comma, space, thin space, apostrophe, dot before
# three digits in European style is left out: "1.500" stays one and a half thousandths), an
# optional decimal part.
# (Every quantifier is bounded, as in ctxleak.sensitive.detect: linear time.)
_NUM = r"\d{1,3}(?:[,\u202f\u00a0 ']\d{3}){1,8}(?:\.\d{1,12})?|\d{1,24}(?:\.\d{1,12})?"
_SCALE = r"(?:\s?(?P<scale>k|K|m|M|bn|million|billion|thousand)\b)?"
_MONEY_RE = re.compile(
    rf"(?<![\w.,])(?:(?P<pre>{_CUR_WORD})\s?(?P<n1>{_NUM}){_SCALE}"
    rf"|(?P<n2>{_NUM}){_SCALE.replace('scale', 'scale2')}\s?(?P<post>{_CUR_AFTER}))"
)
_NUMBER_RE = re.compile(rf"(?<![\w.,\-])(?:{_NUM})(?![\w]|[.,]\d)")
_SCALES = {"k": 1000, "thousand": 1000, "m": 10**6, "million": 10**6, "bn": 10**9,
           "billion": 10**9}


def _number(text: str) -> Decimal | None:
    try:
        return Decimal(re.sub(r"[,\u202f\u00a0 ']", "", text))
    except InvalidOperation:
        return None


def money_values(text: str) -> list[tuple[tuple[str | None, Decimal], int, int]]:
    """Every amount with a currency in ``text``: ``((currency, amount), start, end)``."""
    out = []
    for m in _MONEY_RE.finditer(text):
        num = m.group("n1") or m.group("n2")
        cur = (m.group("pre") or m.group("post") or "").lower()
        scale = (m.group("scale") or m.group("scale2") or "").lower()
        value = _number(num)
        if value is None:
            continue
        value *= _SCALES.get(scale, 1)
        out.append(((_CURRENCY.get(cur.split()[0] if cur else "", None), value),
                    m.start(), m.end()))
    return out


def number_values(text: str) -> list[Decimal]:
    """Every whole number in ``text`` (thousands separators dropped): ``142`` is not read out
    of ``1420``, nor of ``3.142``."""
    return [v for m in _NUMBER_RE.finditer(text) if (v := _number(m.group(0))) is not None]


_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MON = r"(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_DATE_RES = [
    re.compile(rf"\b{_DAY}(?:\s{{1,5}}of)?\s{{1,5}}{_MON}(?:,)?\s{{1,5}}{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MON}\s{{1,5}}{_DAY},?\s{{1,5}}{_YEAR}\b", re.IGNORECASE),
    re.compile(r"(?<![\d.\-/])(?P<year>\d{4})([-/.])(?P<mon>[01]?\d)\2(?P<day>[0-3]?\d)(?![\d\-/])"),
    re.compile(r"(?<![\d.\-/])(?P<a>[0-3]?\d)([-/.])(?P<b>[0-3]?\d)\2(?P<year>\d{4})(?![\d\-/])"),
]


def _day(year: int, month: int, day: int) -> tuple[int, int, int] | None:
    return (year, month, day) if 1 <= month <= 12 and 1 <= day <= 31 else None


def date_values(text: str) -> list[tuple[set[tuple[int, int, int]], int, int]]:
    """Every full date in ``text``: the days it may be (``05/06/2026`` is 5 June or 6 May),
    its start and end."""
    out = []
    for rx in _DATE_RES:
        for m in rx.finditer(text):
            g = m.groupdict()
            year = int(g["year"])
            if g.get("mon") is not None:
                mon = g["mon"].lower().rstrip(".")
                month = _MONTHS.get(mon) if not mon.isdigit() else int(mon)
                days = {_day(year, month or 0, int(g["day"]))}
            else:
                a, b = int(g["a"]), int(g["b"])
                days = {_day(year, a, b), _day(year, b, a)}
            days.discard(None)
            if days:
                out.append(({d for d in days if d is not None}, m.start(), m.end()))
    return out


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _fold(text: str) -> str:
    return " ".join(re.sub(r"[,;]", " ", text).split()).casefold()


def _exact(value: str, answer: str) -> bool:
    """``value`` in ``answer`` as a whole token (not inside a longer run of letters/digits)."""
    v = value.strip()
    if not v:
        return False
    pattern = rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])"
    return re.search(pattern, answer) is not None


def value_in(value: str, kind: str, answer: str) -> bool:
    """Whether ``answer`` repeats ``value`` (of type ``kind``, as :func:`find_sensitive` names
    types), in any of the ways it may be written.

    - ``money``: the same amount (and the same currency where both say one), or the bare
      number: ``$142,000`` is in ``142,000 USD``, ``USD 142,000``, ``142000 dollars``, ``142k``;
    - ``date``: the same day: ``14 June 2026`` is in ``2026-06-14`` and ``June 14, 2026``;
    - ``number``: the same number, thousands separators or not, never part of a longer one;
    - ``phone``: the same digits (the last ten, so a country code may come or go);
    - ``person``, ``address``, ``location``, ``email``, ``medical``: the same words, case and
      punctuation aside;
    - anything else (``password``, ``secret``, ``pin``, ``id``): the exact value as a token.

    Both are compared in :func:`ctxleak.normal_text.normal_text` (NFKC, invisible characters
    removed): a value written with zero-width characters or in decomposed form is the value.
    """
    value, answer = normal_text(value), normal_text(answer)
    if not value or not answer:
        return False
    if kind in ("money", "amount"):
        return _money_in(value, answer)
    if kind == "date":
        wanted = {d for days, _, _ in date_values(value) for d in days}
        if not wanted:
            return _fold(value) in _fold(answer)
        return any(days & wanted for days, _, _ in date_values(answer))
    if kind == "number":
        numbers = number_values(value)
        return bool(numbers) and numbers[0] in number_values(answer)
    if kind == "phone":
        return _phone_in(value, answer)
    if kind in ("person", "name", "address", "location", "email", "medical", "text"):
        return _fold(value) in _fold(answer)
    if kind == "id" and is_iban(value):  # an IBAN grouped by four or written whole
        compact = value.replace(" ", "").upper()
        return any(answer[a:b].replace(" ", "").upper() == compact
                   for a, b in iban_spans(answer, any_case=True))
    return _exact(value, answer)
#: digit groups joined by spaces, dots, dashes or brackets: a phone number and the digits next
#: to it ("+49 171 5550 2291 10969 Berlin"), at most 12 groups at a time
_PHONE_RUN_RE = re.compile(r"\+?\(?\d{1,15}\)?(?:[\s.\-\u2013]{0,3}\(?\d{1,15}\)?){0,11}")


def _phone_in(value: str, answer: str) -> bool:
    """The value's digits (the last ten, so a country code may come or go) in a run of whole
    digit groups of ``answer``: a number copied with other digits right after or before it
    still counts, a number inside a longer group does not."""
    digits = _digits(value)[-10:]
    if len(digits) < 7:
        return False
    for run in _PHONE_RUN_RE.finditer(answer):
        groups = re.findall(r"\d{1,15}", run.group(0))
        for i in range(len(groups)):
            joined = ""
            for group in groups[i:]:
                joined += group
                if len(joined) >= 7 and joined[-10:] == digits:
                    return True
                if len(joined) > 15:
                    break
    return False


def _money_in(value: str, answer: str) -> bool:
    amounts = money_values(value)
    if amounts:
        cur, amount = amounts[0][0]
    else:
        numbers = number_values(value)
        if not numbers:
            return _exact(value, answer)
        cur, amount = None, numbers[0]
    rest = list(answer)
    for (other_cur, other), start, end in money_values(answer):
        if other == amount and (cur is None or other_cur is None or cur == other_cur):
            return True
        rest[start:end] = " " * (end - start)  # an amount in another currency is not a match
    return amount in number_values("".join(rest))
