"""Money amounts, for ``--redact`` (:func:`find_amounts`): digits with a currency, and numbers
after a word about money. Every quantifier is bounded (linear in the text)."""

from __future__ import annotations

import re

from ctxleak.sensitive.span import Span, merge_spans

_CURRENCY = (r"(?:US\$|[ACR]\$|[$€£¥₹₩₽₺₪]|\b(?:USD|EUR|GBP|CHF|JPY|CNY|CAD|AUD|NZD|INR|SEK|NOK|"
             r"DKK|PLN|CZK|HUF|RUB|BRL|MXN|ZAR|SGD|HKD|KRW|TRY|ILS|AED|RON|BGN)\b)")
# 84,500 / 84.500 / 84 500 / 84'500 (one separator throughout), 84500, 84,500.00, 84.500,50
_AMOUNT = (r"(?<![\d.,])(?:" + "|".join(rf"\d{{1,3}}(?:{sep}\d{{3}}){{1,8}}" for sep in
                                      (",", r"\.", "'", "[ \u00a0\u202f]"))
           + r"|\d{1,24})(?:[.,]\d{1,2})?(?!\d|[.,]\d)")
_SCALE = r"(?:[ \t]?(?:k|K|m|M|bn|million|billion|thousand)\b)?"
_AMOUNT_RE = re.compile(
    rf"{_CURRENCY}[ \t\u00a0]?-?(?:{_AMOUNT}){_SCALE}"
    rf"|(?:{_AMOUNT}){_SCALE}[ \t\u00a0]?(?:{_CURRENCY}|\b(?:euros?|dollars?|pounds?|francs?|"
    r"yen|rupees?|yuan|kronor|kroner)\b)")
#: A number after a word about money: "salary: 84500", "earns 84 500", "balance of 1,200".
_MONEY_WORD_RE = re.compile(
    r"\b(?:salary|salaries|wages?|income|pay|paid|earns?|earned|earnings|amount|price|balance|"
    r"bonus|compensation|remuneration|fees?|costs?|rent|payment|debt|loan|owes?|owed)"
    r"(?:[ \t]{0,10}(?:[:=]|\b(?:is|was|of|at|to|now|about|approx\.?|totals?|amounts to)\b))"
    rf"{{0,6}}[ \t]{{0,10}}((?:{_CURRENCY}[ \t\u00a0]?)?(?:{_AMOUNT}){_SCALE})", re.IGNORECASE)


def find_amounts(text: str) -> list[Span]:
    """Money amounts (for redaction; score 0.7): digits with a currency symbol or code before
    or after them (``EUR 84,500``, ``$84,500``, ``84.500 €``, ``84 500 euros``), and numbers
    of three digits or more right after a word about money (``salary: 84500``, ``balance of
    1,200``)."""
    spans = [m.span() for m in _AMOUNT_RE.finditer(text)]
    spans += [m.span(1) for m in _MONEY_WORD_RE.finditer(text)
              if sum(c.isdigit() for c in m.group(1)) >= 3]  # not "cost: 3 passes"
    return [Span("amount", a, b, text[a:b], 0.7) for a, b in merge_spans(spans)]


__all__ = ["find_amounts"]
