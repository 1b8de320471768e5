"""The operator's class of each document (``public``, ``internal``, ``restricted`` …): one file
format for every command that takes ``--classes`` (the privacy proxy, the attacks, the findings
sheet), a JSONL or CSV file of rows with ``id`` and ``class``, or a bundled set's name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ctxleak.bundled import with_classes
from ctxleak.errors import InputError
from ctxleak.mitigations.ledger import PUBLIC
from ctxleak.run.records import iter_rows


def read_classes(path: str | Path) -> dict[str, str]:
    """The operator's class of each document: a JSONL or CSV file of rows with ``id`` and
    ``class``. An id given twice with two classes, a missing or empty field, is an error naming
    the file, line and field."""
    out: dict[str, str] = {}
    for row in iter_rows(Path(path), required=("id", "class")):
        doc, cls = row.text("id"), row.text("class")
        if out.get(doc, cls) != cls:
            raise InputError(f"document {doc!r} is given class {cls!r} here and "
                             f"{out[doc]!r} above", file=row.file, line=row.line, field="class")
        out[doc] = cls
    return out


def classes_of(source: str | Path) -> dict[str, str]:
    """The classes ``source`` names: a bundled set's (``demo-datastore``, unless a file of that
    name exists), else a file (:func:`read_classes`)."""
    bundled = with_classes()
    if isinstance(source, str) and source in bundled and not Path(source).exists():
        return read_classes(Path(str(resources.files("ctxleak") / "data" / "demo"
                                     / bundled[source])))
    return read_classes(source)


__all__ = ["PUBLIC", "classes_of", "read_classes"]
