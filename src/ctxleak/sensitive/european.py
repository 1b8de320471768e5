"""European contact details pyap2 and phonenumbers do not find: German street addresses
(:func:`find_german_addresses`) and IBANs checked by their ISO 13616 mod-97 digits
(:func:`find_ibans`). Every quantifier is bounded (linear in the text)."""

from __future__ import annotations

import re

from ctxleak.sensitive.span import Span

_DE_CAP = r"[A-Z\u00c4\u00d6\u00dc]"
_DE_LOW = r"[a-z\u00e4\u00f6\u00fc\u00df]"
_DE_WORD = rf"{_DE_CAP}{_DE_LOW}{{1,30}}"
_DE_STREET_TYPE = (r"(?:[Ss]tra(?:\u00df|ss)e|[Ss]tr\.|[Ww]eg|[Aa]llee|[Pp]latz|[Gg]asse|[Rr]ing|"
                   r"[Dd]amm|[Uu]fer|[Cc]haussee|[Ss]teig|[Pp]fad|[Mm]arkt|[Gg]raben|[Kk]ai)")
#: A German street address: the street (``Lindenstraße``, ``Karl-Marx-Allee``, ``Berliner
#: Straße``, ``Am Markt``), the house number (``14``, ``14a``, ``14-16``), a comma or a line
#: break, the five-digit postcode and the town (``Frankfurt am Main``, ``Halle (Saale)``).
GERMAN_ADDRESS_RE = re.compile(
    r"(?<![\w-])(?:"
    rf"{_DE_CAP}{_DE_LOW}{{0,30}}(?:-{_DE_WORD}){{0,3}}[- ]?{_DE_STREET_TYPE}"
    rf"|(?:Am|An der|Auf dem|Im|In der|Zum|Zur|Unter den|Alt)[ ]{_DE_WORD}"
    r")[ ]{1,3}\d{1,4}[ ]?[a-zA-Z]?(?:[ ]?[-/][ ]?\d{1,4}[a-zA-Z]?)?"
    r"(?:[ ]{0,3},[ ]{0,3}|[ ]{1,3}|[ ]{0,3}\r?\n[ \t]{0,20})(?:D-)?\d{5}[ ]{1,3}"
    rf"{_DE_WORD}(?:-{_DE_WORD}){{0,2}}"
    rf"(?:[ ](?:am|an der|im|in|ob der|bei)[ ]{_DE_WORD}|[ ]?\({_DE_WORD}\))?"
    r"(?![\w-])")


def find_german_addresses(text: str, *, _masked: str | None = None) -> list[Span]:
    """German street addresses (:data:`GERMAN_ADDRESS_RE`; pyap2 reads US, British and Canadian
    ones only), score 0.9. Phones and e-mails should be masked in ``_masked``."""
    masked = text if _masked is None else _masked
    return [Span("address", m.start(), m.end(), text[m.start():m.end()], 0.9)
            for m in GERMAN_ADDRESS_RE.finditer(masked)]


_IBAN_RE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?"
                      r"(?![A-Za-z0-9])")


def is_iban(value: str) -> bool:
    """Whether ``value`` (spaces allowed) is an IBAN: two letters, two check digits, 11 to 30
    letters and digits, and the ISO 13616 mod-97 check (written here: no IBAN package is
    installed, and Presidio's IBAN recognizer wants a cue or a country's exact layout)."""
    compact = value.replace(" ", "").upper()
    if not (15 <= len(compact) <= 34 and compact[:2].isalpha() and compact[2:4].isdigit()
            and compact.isalnum() and compact.isascii()):
        return False
    digits = "".join(str(int(c, 36)) for c in compact[4:] + compact[:4])
    return int(digits) % 97 == 1


def find_ibans(text: str) -> list[Span]:
    """IBANs, grouped by four or written whole, that pass the mod-97 check (type ``id``,
    score 0.95)."""
    return [Span("id", m.start(), m.end(), m.group(0), 0.95) for m in _IBAN_RE.finditer(text)
            if is_iban(m.group(0))]


__all__ = ["GERMAN_ADDRESS_RE", "find_german_addresses", "find_ibans", "is_iban"]
