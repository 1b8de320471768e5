"""Names found by pattern, for ``--redact`` (:func:`find_names`) and a record's labelled name
(:func:`name_from_text`): cued and labelled capitalised words, and runs that match an e-mail's
local part. Every quantifier is bounded (linear in the text)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from ctxleak.sensitive.span import EMAIL_RE, Span

_NAME_LINE_RE = re.compile(r"^[ \t]{0,40}name[ \t]{0,40}:[ \t]{0,40}(\S[^\n]{0,300}?)[ \t]{0,40}$",
                           re.IGNORECASE | re.MULTILINE)

# A capitalised word of a name: "Ellory-Tan", "Sauvé-Morrow", "O'Neil".
_NAME_WORD = (r"[A-Z\u00c0-\u00de][\w\u00c0-\u024f'\u2019]{0,40}"
              r"(?:-[A-Z\u00c0-\u00de][\w\u00c0-\u024f'\u2019]{0,40}){0,3}")
_NAME_RUN_RE = re.compile(rf"(?<![\w-]){_NAME_WORD}(?:[ ]{_NAME_WORD}){{0,3}}(?![\w-])")
# People's roles in records and letters: "Employee: Marta Velikova", "Approved by: Ines Okafor".
_ROLES = ("employee|staff|worker|customer|client|patient|member|tenant|contact|manager|supervisor|"
          "applicant|candidate|user|owner|holder|guest|student|author|reviewer|approver|requester|"
          "recipient|sender|beneficiary|claimant|witness|spouse|partner|parent|guardian|referee|"
          "agent|representative|assignee|reporter|physician|doctor|nurse|caller|buyer|seller|"
          "landlord|borrower|next of kin|by")
#: Words after which capitalised words are a person's name (the name may start on one of the
#: next two lines after a colon: a label whose value, or passage, starts a new line).
_NAME_CUE_RE = re.compile(
    r"(?:\b(?:full |first |last |patient |member |tenant |contact )?name[ \t]{0,20}(?::|is)"
    rf"|\b(?:{_ROLES})(?:[ \t]{{1,20}}name)?[ \t]{{0,20}}:"
    r"|\b(?:patient|member|tenant|contact|attn|to|from|signed)[ \t]{0,20}[:,]"
    r"|\b(?:dr|mr|mrs|ms|mx|miss|prof)\.?"
    r"|\b(?:dear|hi|hello|cheers|regards|thanks|sincerely|faithfully),?"
    r"|\bmy name(?:,[^,.]{0,60},)? is)"
    r"(?:[ \t]{1,20}|(?<=:)[ \t]{0,20}(?:\r?\n[ \t]{0,20}){1,2})",
    re.IGNORECASE)
#: Any field label at a line start followed by two or three capitalised words and the end of the
#: field: "Reviewer: Ines Okafor", "- Prepared for: Jonas Ekdahl (HR)".
_LABEL_RE = re.compile(
    r"^[ \t]{0,20}(?:[-*\u2022][ \t]{0,20})?([A-Za-z][A-Za-z ]{0,30}?)[ \t]{0,20}:[ \t]{0,20}"
    rf"({_NAME_WORD}(?:[ ]{_NAME_WORD}){{1,2}})[ \t]{{0,20}}(?=$|[,;(|]|\.(?:\s|$))",
    re.MULTILINE)
#: Labels whose value is a thing, a place or an organisation, not a person.
_THING_LABELS = frozenset(
    "city country state county region location place site office branch address street "
    "department dept division unit team company employer organisation organization firm bank "
    "school university college degree programme program course title position role job grade "
    "level status type category subject re product plan project model brand currency language "
    "nationality citizenship gender diagnosis condition medication treatment insurer insurance "
    "policy contract date day month".split())
#: Capitalised words that are no name: roles, greetings and forms of address ("Dear Customer",
#: "Customer since 2019", "Hi Team"); dropped from every name found.
_NOT_NAMES = frozenset(
    "customer customers client clients employee employees staff member members patient "
    "patients tenant tenants contact manager supervisor user users team service support care "
    "sir madam all everyone there the this that our your valued dear hi hello thanks thank "
    "regards best kind sincerely applicant candidate guest owner holder account doctor nurse "
    "reviewer approver colleague colleagues friend friends".split())


def _fold(text: str) -> str:
    """Lower case without accents or hyphens: "Lucía Fenwick-Oduya" -> "lucia fenwickoduya"."""
    plain = unicodedata.normalize("NFKD", text)
    return "".join(c for c in plain if not unicodedata.combining(c)).lower().replace("-", "")


def _cued_names(text: str) -> set[str]:
    """Capitalised runs after a cue or a person's field label (not a label themselves)."""
    names: set[str] = set()
    for cue in _NAME_CUE_RE.finditer(text):
        run = _NAME_RUN_RE.match(text, cue.end())
        if run and not text[run.end():].lstrip(" \t").startswith(":"):
            names.add(run.group(0))
    for m in _LABEL_RE.finditer(text):
        label = m.group(1).split()
        if label and label[-1].lower() not in _THING_LABELS:
            names.add(m.group(2))
    return names


def find_names(text: str, known: Iterable[str] = ()) -> list[Span]:
    """Person names in ``text`` (score 0.5; a heuristic, no NER model): the ``known`` names
    (e.g. a record's ``name``), capitalised words (1 to 4) right after a cue such as
    ``Patient:``, ``Employee:``, ``Name:``, ``my name is``, ``Dr``, ``Hi`` or ``Cheers,``, two or
    three after any other field label at a line start (``Reviewer: Ines Okafor``; not labels of
    places or things such as ``City:``), and runs of capitalised words one of which matches a
    word of an e-mail's local part (``dana.whitlock@...`` -> ``Dana Whitlock``); then every
    occurrence of each of their words, except roles and greetings (``Customer``, ``Dear``)."""
    names = {n.strip() for n in known if n and n.strip()} | _cued_names(text)
    local_words = {w for m in EMAIL_RE.finditer(text)
                   for w in re.split(r"[._+\-]", _fold(m.group(0).split("@")[0])) if len(w) > 2}
    if local_words:
        for run in _NAME_RUN_RE.finditer(text):
            if any(_fold(w) in local_words for w in run.group(0).split()):
                names.add(run.group(0))
    words = {w for n in names for w in n.split() if len(w) > 1 and w.lower() not in _NOT_NAMES}
    if not words:
        return []
    pattern = re.compile(r"(?<![\w-])(?:" + "|".join(
        re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?![\w-])")
    return [Span("name", m.start(), m.end(), m.group(0), 0.5) for m in pattern.finditer(text)]


def name_from_text(text: str) -> str | None:
    """The name on a labelled line ``Name: First Last`` (2-5 words), or ``None``."""
    for m in _NAME_LINE_RE.finditer(text):
        words = m.group(1).split()
        if 1 < len(words) <= 5 and all(w[:1].isupper() for w in words):
            return " ".join(words)
    return None


__all__ = ["find_names", "name_from_text"]
