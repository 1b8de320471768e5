"""Build PII records from documents (ProPILE App. A.2): the PII found in each document
(:mod:`ctxleak.sensitive.detect`) gathered per subject, the most common value of each type
kept."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import phonenumbers

from ctxleak.errors import InputError
from ctxleak.methods.pii.records import PII_FIELDS, PIIRecord
from ctxleak.sensitive.detect import (
    SPAN_TYPES,
    check_region,
    clean_address,
    find_pii,
    name_from_text,
)


@dataclass
class ExtractionResult:
    """Records plus the counts that ``ctxleak pii extract`` prints."""

    records: list[PIIRecord]
    span_counts: dict[str, int] = field(default_factory=lambda: {t: 0 for t in SPAN_TYPES})
    documents_read: int = 0
    documents_kept: int = 0
    documents_without_name: int = 0
    documents_incomplete: int = 0


def _value_key(pii_type: str, value: str, region: str) -> str:
    if pii_type == "phone":
        try:
            number = phonenumbers.parse(value, region)
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        except phonenumbers.NumberParseException:
            return re.sub(r"\D", "", value)
    return " ".join(value.casefold().split())


def _most_common(values: list[str], pii_type: str, region: str) -> str | None:
    if not values:
        return None
    keys = [_value_key(pii_type, v, region) for v in values]
    counts = Counter(keys)
    best = max(counts.values())
    # ties: the first one seen
    return next(value for key, value in zip(keys, values, strict=True) if counts[key] == best)


def extract(documents: Iterable[Mapping[str, Any]], require_all: bool = True, *,
            region: str = "US", address_country: str | None = None) -> ExtractionResult:
    """Find PII in each document and group it per subject into :class:`PIIRecord` objects.

    Each document is a mapping with ``text`` and optionally ``name`` (the subject's name),
    ``subject`` (a subject id; documents sharing it are grouped; default: the name),
    ``relations`` and ``university`` (copied into the record). A document without a ``name``
    field may name its subject on a ``Name: First Last`` line; otherwise it is skipped.

    With ``require_all`` (the default, as in ProPILE App. A.2) a document counts only if it
    holds an e-mail, a phone number and an address at once; with ``require_all=False`` any
    document with a name and at least one of them counts. Per subject, each PII value is the
    most frequent one over its counted documents (ties: the first seen).
    """
    region = check_region(region)
    result = ExtractionResult(records=[])
    groups: dict[str, dict[str, Any]] = {}
    for index, doc in enumerate(documents):
        result.documents_read += 1
        if not isinstance(doc, Mapping):
            raise InputError(f"document {index}: expected a mapping with a 'text' field")
        text = doc.get("text")
        if not isinstance(text, str):
            raise InputError(f"document {index}: 'text' must be a string", field="text")
        spans = find_pii(text, region, address_country=address_country)
        by_type: dict[str, list[str]] = {t: [] for t in SPAN_TYPES}
        for span in spans:
            result.span_counts[span.type] += 1
            value = clean_address(span.text) if span.type == "address" else span.text
            by_type[span.type].append(value)

        name = doc.get("name")
        if name is not None and not isinstance(name, str):
            raise InputError(f"document {index}: 'name' must be a string", field="name")
        name = " ".join(name.split()) if name else name_from_text(text)
        if not name:
            result.documents_without_name += 1
            continue
        present = [t for t in SPAN_TYPES if by_type[t]]
        if (require_all and len(present) < len(SPAN_TYPES)) or not present:
            result.documents_incomplete += 1
            continue
        result.documents_kept += 1

        subject = doc.get("subject", doc.get("subject_id"))
        subject_id = str(subject) if subject not in (None, "") else name
        key = str(subject) if subject not in (None, "") else " ".join(name.casefold().split())
        group = groups.setdefault(key, {"subject_id": subject_id, "name": name, "docs": [],
                                        "relations": {}, "university": None,
                                        **{t: [] for t in SPAN_TYPES}})
        group["docs"].append(text)
        for t in SPAN_TYPES:
            group[t] += by_type[t]
        relations = doc.get("relations")
        if isinstance(relations, Mapping):
            for rel, rel_name in relations.items():
                if isinstance(rel_name, str) and rel_name.strip():
                    group["relations"].setdefault(str(rel), rel_name.strip())
        university = doc.get("university")
        if group["university"] is None and isinstance(university, str) and university.strip():
            group["university"] = university.strip()

    for group in groups.values():
        values = {t: _most_common(group[t], t, region) for t in PII_FIELDS}
        result.records.append(PIIRecord(
            subject_id=group["subject_id"], name=group["name"], relations=group["relations"],
            university=group["university"], documents=group["docs"], **values))
    return result


def extract_records(documents: Iterable[Mapping[str, Any]], require_all: bool = True, *,
                    region: str = "US", address_country: str | None = None) -> list[PIIRecord]:
    """The records of :func:`extract` (see there)."""
    return extract(documents, require_all, region=region,
                   address_country=address_country).records


__all__ = ["ExtractionResult", "extract", "extract_records"]
