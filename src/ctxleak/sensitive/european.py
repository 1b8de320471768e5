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


#: An IBAN-like run: two letters, two digits, then groups of letters and digits parted by at
#: most one space; it may run on into the words after the IBAN ("... 0130 00 as instructed"):
#: :func:`iban_spans` keeps its longest prefix, in whole groups, that passes the mod-97 check.
_IBAN_LIKE = r"(?<![A-Za-z0-9]){cc}\d{{2}}(?:[ ]?[A-Za-z0-9]{{1,4}}){{2,10}}"
_IBAN_RES = {False: re.compile(_IBAN_LIKE.format(cc="[A-Z]{2}")),
             True: re.compile(_IBAN_LIKE.format(cc="[A-Za-z]{2}"))}
_GROUP_RE = re.compile(r"[A-Za-z0-9]{1,4}")


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


def iban_spans(text: str, any_case: bool = False) -> list[tuple[int, int]]:
    """Where ``text`` writes an IBAN, grouped by four or whole (``any_case``: its letters in
    either case): each IBAN-like run cut to its longest prefix of whole groups that
    :func:`is_iban` accepts, so that no word after it (``as instructed``) is taken in."""
    out = []
    for m in _IBAN_RES[any_case].finditer(text):
        ends = [g.end() for g in _GROUP_RE.finditer(m.group(0), 4)]
        for end in reversed(ends):
            if end < len(m.group(0)) and m.group(0)[end].isalnum():
                continue  # a group cut inside a word
            if is_iban(m.group(0)[:end]):
                out.append((m.start(), m.start() + end))
                break
    return out


def find_ibans(text: str) -> list[Span]:
    """IBANs, grouped by four or written whole, that pass the mod-97 check, whatever follows
    them (type ``id``, score 0.95)."""
    return [Span("id", a, b, text[a:b], 0.95) for a, b in iban_spans(text)]


__all__ = ["GERMAN_ADDRESS_RE", "find_german_addresses", "find_ibans", "iban_spans", "is_iban"]
