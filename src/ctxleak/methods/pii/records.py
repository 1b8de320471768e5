"""PII records: one data subject's name and PII, read from and written to JSONL.

A record file holds one JSON object per line::

    {"subject_id": "s00001", "name": "...", "email": "...", "phone": "...", "address": "...",
     "relations": {"father": "...", "mother": "..."}, "university": "...", "documents": ["..."]}

Only ``name`` is required. Files that hold PII are written with mode 0600, atomically (a temporary
file in the same directory, then moved into place), so an interrupted write never leaves half a
file behind; an existing file is replaced only when asked (``overwrite=True``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from ctxleak.errors import InputError
from ctxleak.run.atomic import refuse_replacing, write_atomic
from ctxleak.run.records import example_id, read_jsonl, reject_duplicate_ids

__all__ = [
    "PII_FIELDS",
    "PIIRecord",
    "load_records",
    "read_jsonl",
    "save_records",
    "write_private_jsonl",
]

# The structured PII types of a record (App. A.2), in the order the quadruplet templates use.
PII_FIELDS = ("phone", "email", "address")

_OPTIONAL_STR_FIELDS = ("email", "phone", "address", "university")


@dataclass(frozen=True)
class PIIRecord:
    """One data subject. Empty PII is ``None``; ``relations`` maps a relationship to a name."""

    subject_id: str
    name: str
    email: str | None = None
    phone: str | None = None
    address: str | None = None
    relations: dict[str, str] = field(default_factory=dict)
    university: str | None = None
    documents: list[str] = field(default_factory=list)

    def get(self, pii_type: str) -> str | None:
        """The value of a structured PII type (``email``, ``phone``, ``address``, ``university``)
        or of a relationship (``father``, ``mother``, ...)."""
        if pii_type in _OPTIONAL_STR_FIELDS or pii_type == "name":
            return cast("str | None", getattr(self, pii_type))
        return self.relations.get(pii_type)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # the fields in order, relations and documents copied

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None,
                  line: int | None = None) -> PIIRecord:
        """Build a record from a mapping, checking types. Errors are :class:`InputError` naming
        ``file``, ``line`` and the field when those are given."""
        if not isinstance(data, Mapping):
            raise InputError(f"expected a JSON object, got {type(data).__name__}",
                             file=file, line=line)

        def bad(field_name: str, message: str) -> InputError:
            return InputError(message, file=file, line=line, field=field_name)

        name = data.get("name")
        if name is None:
            raise bad("name", "missing required field (every record needs the subject's name)")
        if not isinstance(name, str) or not name.strip():
            raise bad("name", f"must be a non-empty string, got {_describe(name)}")

        values: dict[str, Any] = {}
        for key in _OPTIONAL_STR_FIELDS:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise bad(key, f"must be a string or null, got {_describe(value)}")
            values[key] = value if value else None

        subject_id = data.get("subject_id", data.get("subject"))
        if subject_id is None:
            subject_id = name
        else:
            subject_id = example_id(subject_id, file=file, line=line,
                                    field="subject_id")

        relations = data.get("relations")
        if relations is None:
            relations = {}
        if not isinstance(relations, Mapping):
            raise bad("relations", f"must be an object of relationship -> name, got "
                                   f"{_describe(relations)}")
        for rel, rel_name in relations.items():
            if not isinstance(rel_name, str) or not rel_name.strip():
                raise bad(f"relations.{rel}", f"must be a non-empty string, got "
                                              f"{_describe(rel_name)}")

        documents = data.get("documents")
        if documents is None:
            documents = []
        if not isinstance(documents, list):
            raise bad("documents", f"must be a list of strings, got {_describe(documents)}")
        for i, doc in enumerate(documents):
            if not isinstance(doc, str):
                raise bad(f"documents[{i}]", f"must be a string, got {_describe(doc)}")
            if not doc.strip():  # in-context probing would put an empty context in the prompt
                raise bad(f"documents[{i}]", "is empty (remove it, or give the document's text)")

        return cls(subject_id=subject_id, name=name.strip(), relations=dict(relations),
                   documents=list(documents), **values)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str) and not value.strip():
        return "an empty string"
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def load_records(path: str | Path) -> list[PIIRecord]:
    """Read PII records from a JSONL file (one object per line; blank lines are skipped).

    Errors name the file, the 1-based line and the field: malformed JSON, a line that is not an
    object, a missing ``name``, a field of the wrong type, a repeated ``subject_id``.
    """
    records: list[PIIRecord] = []
    lines: list[int] = []
    for number, obj in read_jsonl(path):
        records.append(PIIRecord.from_dict(obj, file=str(path), line=number))
        lines.append(number)
    reject_duplicate_ids(((r.subject_id, str(path), n) for r, n in zip(records, lines)),
                         field="subject_id")
    return records


def write_private_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path, *,
                        overwrite: bool = False) -> Path:
    """Write ``rows`` as JSONL to ``path`` with mode 0600, whole or not at all (a temporary file
    in the same folder, synced, then moved into place; parent folders are created).

    An existing ``path`` is refused (:class:`~ctxleak.errors.OutputError`) unless
    ``overwrite=True``: ctxleak never replaces a file it was not asked to."""
    path = Path(path)
    refuse_replacing(path, overwrite=overwrite)
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, 0o600, replace=overwrite)
    return path


def save_records(records: Iterable[PIIRecord], path: str | Path, *,
                 overwrite: bool = False) -> Path:
    """Write records as JSONL with mode 0600, atomically; an existing file only with
    ``overwrite=True`` (see :func:`write_private_jsonl`)."""
    return write_private_jsonl((r.to_dict() for r in records), path, overwrite=overwrite)
