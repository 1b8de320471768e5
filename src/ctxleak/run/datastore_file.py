"""Reading a datastore file (``--datastore FILE``): a JSONL of ``{"id", "text"}`` objects, read
with the same discipline as every other input (:func:`ctxleak.run.records.read_jsonl`), so a bad
file is one line naming the file, the line and the field, never a traceback.

Refused, each at its line: text that is not UTF-8, a line over the input limit, JSON nested
past the parser's limit, a line that is not an object, a missing ``id`` or ``text``, an id that
is not a string (``true`` and ``7`` are not ids: the ledger keys documents by text, and ``7``
and ``"7"`` would be one document), an id that is empty, only spaces or holds a control
character, an id given twice (compared in Unicode NFC without surrounding spaces), and a text
that holds a lone surrogate or a NUL, or has no visible character (only spaces, zero-width or
other format characters). A UTF-8 byte-order mark at the start and CRLF line ends are read.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.mitigations.datastore import BUNDLED_DATASTORES, Datastore
from ctxleak.run.records import example_id, id_key, read_jsonl

#: Code points that print nothing although Unicode files them as letters (the Hangul fillers,
#: the Mongolian vowel separator, the blank Braille pattern).
_BLANK_LETTERS = frozenset("\u115f\u1160\u180e\u2800\u3164\uffa0")


def is_visible(text: str) -> bool:
    """Whether ``text`` has a character that prints: not a space or separator (Z*), a control,
    format, private-use, surrogate or unassigned code point (C*), a combining mark alone (M*)
    or one of :data:`_BLANK_LETTERS`."""
    return any(c not in _BLANK_LETTERS and unicodedata.category(c)[0] not in "ZCM"
               for c in text)


def _field(row: Any, name: str, file: str, line: int) -> str:
    if name not in row:
        raise InputError("missing field", file=file, line=line, field=name)
    value = row[name]
    if not isinstance(value, str):
        kind = {bool: "true/false", int: "a number", float: "a number",
                type(None): "null"}.get(type(value), type(value).__name__)
        raise InputError(f"must be a string, got {kind}", file=file, line=line, field=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("holds a lone surrogate (a \\ud800-\\udfff escape that is not half "
                         "of a pair): not valid Unicode text", file=file, line=line,
                         field=name) from None
    if "\x00" in value:
        raise InputError("holds a NUL character (\\u0000)", file=file, line=line, field=name)
    return value


def read_datastore(path: str | Path) -> Datastore:
    """The datastore of the JSONL file ``path`` (other fields of a row are ignored); a bad file
    is an :class:`InputError` naming the file, the line and the field (the module's list)."""
    where = str(path)
    first: dict[str, int] = {}
    pairs: list[tuple[str, str]] = []
    for line, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise InputError("each line must be a JSON object with 'id' and 'text'",
                             file=where, line=line)
        doc_id = example_id(_field(row, "id", where, line), file=where, line=line)
        text = _field(row, "text", where, line)
        if not is_visible(text):
            raise InputError("has no visible character (only spaces, zero-width or other "
                             "invisible characters)", file=where, line=line, field="text")
        key = id_key(doc_id)
        if key in first:
            raise InputError(f"duplicate id {doc_id!r} (first on line {first[key]}): every "
                             "document needs its own id", file=where, line=line, field="id")
        first[key] = line
        pairs.append((doc_id, text))
    if not pairs:
        raise InputError("no documents in the file", file=where)
    return Datastore(tuple(pairs))


def bundled_datastore(name: str) -> Datastore:
    """The datastore of a bundled set (:data:`BUNDLED_DATASTORES`, e.g. ``demo-datastore``)."""
    if name not in BUNDLED_DATASTORES:
        raise ConfigError(f"datastore: no bundled datastore named {name!r}; there are "
                          f"{', '.join(BUNDLED_DATASTORES)}", param="datastore")
    return read_datastore(Path(str(resources.files("ctxleak") / "data" / "demo"
                                   / BUNDLED_DATASTORES[name])))


def datastore_of(documents: Sequence[tuple[str, str]] | Datastore | str | Path | None
                 ) -> Datastore | None:
    """``documents`` as a :class:`Datastore`: one as is, a JSONL path read
    (:func:`read_datastore`), pairs collected (:meth:`Datastore.of`); None stays None."""
    if documents is None or isinstance(documents, Datastore):
        return documents
    if isinstance(documents, (str, Path)):
        return read_datastore(documents)
    return Datastore.of(documents)


def load_datastore(source: Any) -> Datastore:
    """``--datastore``'s value as a :class:`Datastore`: a bundled set's name (unless a file of
    that name exists), a JSONL file, or a :class:`Datastore` as is."""
    if isinstance(source, str) and source in BUNDLED_DATASTORES and not Path(source).exists():
        return bundled_datastore(source)
    if isinstance(source, (str, Path)):
        return read_datastore(source)
    if not isinstance(source, Datastore):
        raise ConfigError(f"datastore must be a Datastore, a JSONL file or "
                          f"{', '.join(BUNDLED_DATASTORES)}, not {type(source).__name__}",
                          param="datastore")
    return source


__all__ = ["bundled_datastore", "datastore_of", "is_visible", "load_datastore",
           "read_datastore"]
