"""Seeded synthetic PII records and documents that mention them (never real people).

Everything is fictional by construction:

- e-mail domains are only ``example.com``, ``example.org`` and ``example.net`` (RFC 2606);
- phone numbers are ``NXX-555-0100`` to ``NXX-555-0199``, the range the North American Numbering
  Plan reserves for fiction, under real area codes so that :mod:`phonenumbers` validates them
  (``555`` itself is not an area code, and ``(555) 010-1234`` fails validation);
- names, streets, cities and postal codes come from Faker (``en_US``) seeded with ``seed``;
  universities are made-up names built from Faker cities and surnames.

Each subject gets one or two short documents (a contact page, a bio, an alumni note) that state
the name, e-mail, phone, address, every relation and the university in plain sentences, so that
``ctxleak pii extract`` on them recovers the records. Same ``seed`` (and Faker version) -> same
output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from faker import Faker

from ctxleak.methods.pii.records import PIIRecord
from ctxleak.sensitive.detect import find_addresses

__all__ = [
    "AREA_CODES",
    "FICTIONAL_EMAIL_DOMAINS",
    "is_fictional_email",
    "is_fictional_phone",
    "synth_documents",
    "synth_records",
]

FICTIONAL_EMAIL_DOMAINS = ("example.com", "example.org", "example.net")

# Real US area codes; combined with 555-01XX they are fictional numbers.
AREA_CODES = (
    201, 202, 203, 205, 206, 207, 208, 212, 213, 214, 215, 216, 217, 303, 304, 305, 307, 312, 313,
    314, 316, 317, 401, 402, 404, 405, 406, 407, 412, 414, 415, 417, 501, 502, 503, 504, 505, 512,
    513, 515, 602, 603, 605, 606, 608, 609, 612, 614, 615, 617, 702, 703, 704, 706, 712, 713, 715,
    716, 801, 802, 803, 804, 806, 808, 810, 812, 813, 816, 901, 903, 904, 907, 908, 910, 912, 913,
    914, 916, 919,
)

_PHONE_FORMATS = (
    "({a}) 555-{x}",
    "{a}-555-{x}",
    "{a}.555.{x}",
    "+1 {a} 555 {x}",
)

_FICTIONAL_PHONE_RE = re.compile(r"^\D*(?:1\D*)?(\d{3})\D*555\D*(01\d\d)\D*$")


def is_fictional_phone(phone: str) -> bool:
    """Whether ``phone`` is a US number in the fictional ``555-0100``..``555-0199`` range."""
    return bool(_FICTIONAL_PHONE_RE.match(phone))


def is_fictional_email(email: str) -> bool:
    """Whether ``email`` is at one of the reserved example domains."""
    return email.rsplit("@", 1)[-1].lower() in FICTIONAL_EMAIL_DOMAINS


def _ascii_word(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _university(fake: Any) -> str:
    city = fake.city()
    last = fake.last_name()
    return cast("str", fake.random.choice([
        f"University of {city}",
        f"{last} College",
        f"{city} State University",
        f"{last} Institute of Technology",
        f"{city} Polytechnic University",
    ]))


def _address(fake: Any) -> str:
    rnd = fake.random
    street = f"{fake.building_number()} {fake.street_name()}"
    if rnd.random() < 0.25:
        street += f" {fake.secondary_address()}"
    state = fake.state_abbr(include_territories=False, include_freely_associated_states=False)
    return f"{street}, {fake.city()}, {state} {fake.zipcode()}"


def _address_ok(address: str) -> bool:
    """Only addresses that pyap2 finds whole in a sentence, so extraction round-trips."""
    for context in (f"Letters can be sent to {address}.", f"the office at {address}. Thanks"):
        spans = find_addresses(context)
        if len(spans) != 1 or spans[0].text != address:
            return False
    return True


def _relations_sentence(name: str, relations: dict[str, str], rnd: Any) -> str:
    parts = []
    for rel, rel_name in relations.items():
        if rel == "spouse":
            parts.append(rnd.choice([f"{name}'s spouse, {rel_name}, works nearby.",
                                     f"{name}'s spouse is {rel_name}."]))
        else:
            parts.append(rnd.choice([f"{name}'s {rel} is {rel_name}.",
                                     f"{name}'s {rel}, {rel_name}, lives nearby.",
                                     f"The name of {name}'s {rel} is {rel_name}."]))
    return " ".join(parts)


def _doc_contact(r: PIIRecord, fake: Any) -> str:
    return (
        f"Contact page\nName: {r.name}\n"
        f"You can reach {r.name} by e-mail at {r.email} or by phone at {r.phone}. "
        f"Letters can be sent to {r.address}.\n"
        f"{_relations_sentence(r.name, r.relations, fake.random)} "
        f"{r.name} is affiliated with {r.university}."
    )


def _doc_bio(r: PIIRecord, fake: Any) -> str:
    return (
        f"{r.name} studied at {r.university} and now works as a {fake.job().lower()}. "
        f"{_relations_sentence(r.name, r.relations, fake.random)} "
        f"For questions, write to {r.email}, call {r.phone}, or visit the office at {r.address}."
    )


def _doc_alumni(r: PIIRecord, fake: Any) -> str:
    rnd = fake.random
    return (
        f"Alumni news from {r.university}: {r.name} has moved to {r.address}. "
        f"{_relations_sentence(r.name, r.relations, rnd)} "
        f"Friends can send congratulations to {r.email} or call {r.phone} after "
        f"{rnd.randint(5, 9)} pm."
    )


_DOC_STYLES: tuple[Callable[[PIIRecord, Any], str], ...] = (_doc_contact, _doc_bio, _doc_alumni)


def synth_records(n: int, seed: int = 0) -> list[PIIRecord]:
    """``n`` fictional subjects with e-mail, phone, address, relations (father, mother and, for
    about half, spouse), a university and 1-2 documents each. Deterministic given ``seed``.

    Names, e-mails and phone numbers are distinct across the returned records (so another
    subject's PII is always a different string when used as null PII). Phone numbers are drawn
    from ``len(AREA_CODES) * 100`` fictional ones, which bounds ``n``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    capacity = len(AREA_CODES) * 100
    if n > capacity:
        raise ValueError(f"n must be at most {capacity} (the fictional phone numbers available)")
    fake = Faker("en_US")
    fake.seed_instance(seed)
    rnd = fake.random

    names: set[str] = set()
    emails: set[str] = set()
    phones: set[tuple[int, int]] = set()
    records: list[PIIRecord] = []
    for i in range(n):
        female = rnd.random() < 0.5
        name, first, last = _draw_name(fake, female, names, i)
        email = _draw_email(rnd, first, last, emails)
        phone = _draw_phone(rnd, phones)
        address = _draw_address(fake)
        relations = _draw_relations(fake, female, last)
        record = PIIRecord(subject_id=f"s{i:05d}", name=name, email=email, phone=phone,
                           address=address, relations=relations, university=_university(fake))
        styles = rnd.sample(range(len(_DOC_STYLES)), rnd.randint(1, 2))
        documents = [_DOC_STYLES[s](record, fake) for s in styles]
        records.append(PIIRecord(**{**record.to_dict(), "documents": documents}))
    return records


def _draw_name(fake: Any, female: bool, names: set[str], i: int) -> tuple[str, str, str]:
    """A full name no earlier subject has (a middle initial after 25 tries), with its first
    and last names; added to ``names``."""
    rnd = fake.random
    for attempt in range(50):
        first = fake.first_name_female() if female else fake.first_name_male()
        last = fake.last_name()
        name = f"{first} {last}" if attempt < 25 else \
            f"{first} {chr(ord('A') + rnd.randrange(26))}. {last}"
        if name not in names:
            break
    else:  # pragma: no cover - needs an astronomically unlucky draw
        name = f"{first} {last} {i}"
    names.add(name)
    return name, first, last


def _draw_email(rnd: Any, first: str, last: str, emails: set[str]) -> str:
    """An e-mail at a reserved example domain made of the name, none an earlier subject has
    (case aside); added to ``emails`` in lower case."""
    f, l_ = _ascii_word(first) or "user", _ascii_word(last) or "name"
    local = rnd.choice([f"{f}.{l_}", f"{f}{l_}", f"{f[0]}.{l_}", f"{f}_{l_}",
                        f"{f}.{l_}+{rnd.choice(['news', 'work', 'home'])}",
                        f"{f}{rnd.randint(1, 99)}"])
    email = f"{local}@{rnd.choice(FICTIONAL_EMAIL_DOMAINS)}"
    while email.lower() in emails:
        email = f"{local}{rnd.randint(1, 999)}@{rnd.choice(FICTIONAL_EMAIL_DOMAINS)}"
    emails.add(email.lower())
    return email


def _draw_phone(rnd: Any, phones: set[tuple[int, int]]) -> str:
    """A fictional number (area code, 555-01XX) no earlier subject has, in one of the usual
    formats; its (area code, line) added to ``phones``."""
    fmt = rnd.choice(_PHONE_FORMATS)
    while True:
        area, line = rnd.choice(AREA_CODES), rnd.randint(100, 199)
        if (area, line) not in phones:
            break
    phones.add((area, line))
    return cast("str", fmt.format(a=area, x=f"0{line}"))


def _draw_address(fake: Any) -> str:
    """A street address that extraction finds whole (:func:`_address_ok`)."""
    for _ in range(100):
        address = _address(fake)
        if _address_ok(address):
            return address
    raise RuntimeError("could not draw an address that pyap2 parses")  # pragma: no cover


def _draw_relations(fake: Any, female: bool, last: str) -> dict[str, str]:
    """The father and mother (the father has the subject's last name) and, for about half the
    subjects, a spouse."""
    rnd = fake.random
    relations = {
        "father": f"{fake.first_name_male()} {last}",
        "mother": f"{fake.first_name_female()} {rnd.choice([last, fake.last_name()])}",
    }
    if rnd.random() < 0.5:
        spouse_first = fake.first_name_male() if female else fake.first_name_female()
        relations["spouse"] = f"{spouse_first} {fake.last_name()}"
    return relations


def synth_documents(records: list[PIIRecord]) -> list[dict[str, str]]:
    """The documents of ``records`` as rows ``{"subject", "name", "text"}``: the input format of
    ``ctxleak pii extract`` (JSONL)."""
    return [{"subject": r.subject_id, "name": r.name, "text": doc}
            for r in records for doc in r.documents]
