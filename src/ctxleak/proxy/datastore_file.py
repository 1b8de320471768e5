"""The files ``ctxleak serve`` reads besides its flags: the datastore it answers over
(:mod:`ctxleak.run.datastore_file`, one line naming the file, line and field for any bad row)
and the operator's document classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.run.datastore_file import load_datastore
from ctxleak.run.records import iter_rows


def read_classes(path: str | Path) -> dict[str, str]:
    """The operator's class of each document: a JSONL or CSV file of rows with ``id`` and
    ``class`` (``ctxleak serve --classes FILE``). An id given twice with two classes, a missing
    or empty field, is an error naming the file, line and field."""
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
    from ctxleak.bundled import with_classes

    bundled = with_classes()
    if isinstance(source, str) and source in bundled and not Path(source).exists():
        from importlib import resources

        return read_classes(Path(str(resources.files("ctxleak") / "data" / "demo"
                                     / bundled[source])))
    return read_classes(source)


def datastore_option(source: Any, mechanism: Any) -> Datastore:
    """``--datastore``'s value as a :class:`Datastore` (a file, or a bundled set's name), with
    a mechanism to answer over it."""
    store = load_datastore(source)
    if mechanism is None:
        raise ConfigError("a datastore is answered over by a mechanism: give one too "
                          "(--mechanism, e.g. dp-rag:eps=5)", param="datastore")
    return store


__all__ = ["classes_of", "datastore_option", "read_classes"]
