"""Rows of a run folder's sample files read on demand (:class:`StoredRows`): a row is its name
(:func:`row_key`) and its line's byte span, parsed when it is asked for, so a run of any length
keeps a name and a few integers per row in memory, not the rows; a row changed after reading is
kept changed (:class:`Row`); a field's values read one by one (:class:`Column`); light rows and a
selection of rows that stay read on demand (:func:`without_fields`, :func:`select_rows`).

Reading and checking the files these rows come from is :mod:`ctxleak.run.samples`.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, overload

from ctxleak.errors import InputError

KEY_FIELD = "key"


def row_key(row: Mapping[str, Any]) -> Any:
    """The name a sample row is stored under in its run folder, what resume, shard merging and
    ``sample_ids`` go by: its ``key`` where the method names the item apart from the user's
    ``id`` (one example measured under several settings: ``hr|lambda=1,T=0.8,context=all``),
    else its ``id`` (rows of older run folders, whose ``id`` was that name)."""
    return row[KEY_FIELD] if KEY_FIELD in row else row.get("id")


Convert = Callable[[Any, dict[str, Any]], dict[str, Any]]


class StoredRows(Sequence[dict[str, Any]]):
    """Rows of sample files read on demand (the module docstring says how), each row's line
    span a file, an offset and a length. A :class:`~collections.abc.Sequence`: ``len``,
    iteration (any number of times, in order), indexing and slicing (a slice is another
    ``StoredRows``), and equality with any sequence of the same rows (a list included).

    ``tags`` (optional, one per row) and ``convert``: each row read is ``convert(tag, row)``
    (the runner gives rows of an older run folder their user's id back this way).

    A row is found by its name: where the line at its span is not that row any more (the file
    was rewritten since, by a merge of shards or by hand), the file is read again for it; a row
    gone from it is an :class:`~ctxleak.errors.InputError` naming the file and the row."""

    __slots__ = ("_convert", "_edits", "_file", "_files", "_keys", "_offset", "_post", "_size",
                 "_tags")

    def __init__(self, files: Sequence[Path], keys: Sequence[Any], file_numbers: Iterable[int],
                 offsets: Iterable[int], sizes: Iterable[int], *,
                 tags: Sequence[Any] | None = None, convert: Convert | None = None,
                 edits: dict[Any, Row] | None = None,
                 post: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self._files = list(files)
        self._keys = keys
        self._file = array("l", file_numbers)
        self._offset = array("q", offsets)
        self._size = array("q", sizes)
        if not len(self._keys) == len(self._file) == len(self._offset) == len(self._size):
            raise ValueError("one name, file number, offset and size per row")
        if tags is not None and len(tags) != len(self._offset):
            raise ValueError("one tag per row")
        self._tags = tags
        self._convert = convert
        self._edits: dict[Any, Row] = {} if edits is None else edits  # rows changed, by name
        self._post = post

    def __len__(self) -> int:
        return len(self._offset)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> StoredRows: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | StoredRows:
        if isinstance(index, slice):
            return StoredRows(self._files, self._keys[index], self._file[index],
                              self._offset[index], self._size[index],
                              tags=None if self._tags is None else self._tags[index],
                              convert=self._convert, edits=self._edits, post=self._post)
        i = range(len(self))[index]  # an IndexError past the end, negative indices from it
        with open(self._files[self._file[i]], "rb") as f:
            return self._read(i, f)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        handles: dict[int, Any] = {}
        try:
            for i in range(len(self)):
                k = self._file[i]
                f = handles.get(k)
                if f is None:
                    f = handles[k] = open(self._files[k], "rb")
                yield self._read(i, f)
        finally:
            for f in handles.values():
                f.close()

    @property
    def keys(self) -> Sequence[Any]:
        """Each row's name (:func:`row_key`), in order, without reading the rows."""
        return self._keys

    def pick(self, indices: Sequence[int], convert: Convert | None = None) -> StoredRows:
        """The rows at ``indices`` (in that order), read through ``convert`` where given (else
        through this one's, with their tags)."""
        tags = None if self._tags is None or convert is not None \
            else [self._tags[i] for i in indices]
        return StoredRows(self._files, [self._keys[i] for i in indices],
                          [self._file[i] for i in indices], [self._offset[i] for i in indices],
                          [self._size[i] for i in indices], tags=tags,
                          convert=convert or self._convert,
                          edits=None if convert is not None else self._edits, post=self._post)

    def mapped(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> StoredRows:
        """The same rows, each read as ``fn(row)`` (a copy: changing it changes no row)."""
        post = fn if self._post is None else partial(_compose, self._post, fn)
        return StoredRows(self._files, self._keys, self._file, self._offset, self._size,
                          tags=self._tags, convert=self._convert, edits=self._edits, post=post)

    def _read(self, i: int, f: Any) -> dict[str, Any]:
        row: dict[str, Any] | None = self._edits.get(self._keys[i])
        if row is None:
            row = Row(self._parsed(i, f))
            row._keep_in(self._edits, self._keys[i])
        return row if self._post is None else self._post(row)

    def _parsed(self, i: int, f: Any) -> dict[str, Any]:
        row = self._at(i, f)
        if row is None:  # the file was rewritten: find each of its rows again by name
            self._find_again(self._file[i])
            row = self._at(i, f)
            if row is None:
                raise InputError(f"has no row named {self._keys[i]!r} any more: the file was "
                                 "changed after the run wrote it",
                                 file=str(self._files[self._file[i]]))
        return row if self._convert is None else self._convert(
            None if self._tags is None else self._tags[i], row)

    def _at(self, i: int, f: Any) -> dict[str, Any] | None:
        """Row ``i`` as its span holds it, None where the span holds another line."""
        if f.tell() != self._offset[i]:
            f.seek(self._offset[i])
        raw = f.read(self._size[i])
        if len(raw) != self._size[i] or not raw.endswith(b"\n"):
            return None
        try:
            row = json.loads(raw)
        except ValueError:  # UnicodeDecodeError is one
            return None
        return row if isinstance(row, dict) and row_key(row) == self._keys[i] else None

    def _find_again(self, number: int) -> None:
        spans: dict[Any, tuple[int, int]] = {}
        at = 0
        with open(self._files[number], "rb") as f:
            for raw in f:
                if raw.strip() and raw.endswith(b"\n"):
                    try:
                        row = json.loads(raw)
                    except ValueError:
                        row = None
                    if isinstance(row, dict):
                        spans.setdefault(row_key(row), (at, len(raw)))
                at += len(raw)
        for i in range(len(self)):
            if self._file[i] == number and self._keys[i] in spans:
                self._offset[i], self._size[i] = spans[self._keys[i]]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, as a list

    def to_list(self) -> list[dict[str, Any]]:
        """Every row read into a plain list (of the same row dicts: a change stays, as in a
        list of dicts): for what needs a list, ``json.dumps(result.records.to_list())`` or
        ``.append``. Holds the whole run in memory, as a list of dicts did."""
        return list(self)

    def copy(self) -> list[dict[str, Any]]:
        """A list of the rows (:meth:`to_list`), as ``list.copy`` gives."""
        return self.to_list()

    def __add__(self, other: Any) -> list[dict[str, Any]]:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return self.to_list() + list(other)

    def __radd__(self, other: Any) -> list[dict[str, Any]]:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return list(other) + self.to_list()

    #: What a list does that rows read on demand cannot (each says to use :meth:`to_list`).
    LIST_ONLY = frozenset({"append", "extend", "insert", "remove", "pop", "sort", "clear",
                           "reverse"})

    def __getattr__(self, name: str) -> Any:
        if name in StoredRows.LIST_ONLY:
            raise AttributeError(
                f"{name}: these records are read from the run folder on demand (a sequence, "
                f"not a list); list(result.records) or result.records.to_list() gives a list "
                f"of dicts that can {name}, and json.dumps(list(result.records)) writes them "
                "as JSON")
        raise AttributeError(f"'StoredRows' object has no attribute {name!r}")

    def __repr__(self) -> str:
        files = ", ".join(str(p) for p in self._files)
        return f"StoredRows({len(self)} rows of {files or 'no file'})"


def _compose(first: Callable[[dict[str, Any]], dict[str, Any]],
             then: Callable[[dict[str, Any]], dict[str, Any]], row: dict[str, Any]
             ) -> dict[str, Any]:
    return then(first(row))


class Row(dict[str, Any]):
    """A row of :class:`StoredRows` as read: a dict. Changing it (an item set, deleted,
    updated) keeps it, changed, in the rows it was read from, so that every later read of them
    (iteration, index, slice) gives the changed row, as a list of dicts would; a row nobody
    changed is read from the file again. A change inside a nested value (a list's item) of a
    row not otherwise changed is not kept."""

    __slots__ = ("_edits", "_name")

    def _keep_in(self, edits: dict[Any, Row], name: Any) -> None:
        self._edits: dict[Any, Row] | None = edits
        self._name = name

    def _changed(self) -> None:
        edits = getattr(self, "_edits", None)
        if edits is not None:
            edits[self._name] = self

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def setdefault(self, key: str, default: Any = None) -> Any:
        out = super().setdefault(key, default)
        self._changed()
        return out

    def pop(self, key: str, *default: Any) -> Any:
        out = super().pop(key, *default)
        self._changed()
        return out

    def popitem(self) -> tuple[str, Any]:
        out = super().popitem()
        self._changed()
        return out

    def clear(self) -> None:
        super().clear()
        self._changed()

    def __ior__(self, other: Any) -> Row:  # type: ignore[override,misc]
        super().__ior__(other)
        self._changed()
        return self


def without_fields(records: Sequence[dict[str, Any]], names: frozenset[str]
                   ) -> Sequence[dict[str, Any]]:
    """The records without the fields ``names`` (light rows for a reader that keeps them): of
    :class:`StoredRows`, rows read on demand; of a list, a list of copies."""
    if isinstance(records, StoredRows):
        return records.mapped(partial(_drop, names))
    return [_drop(names, row) for row in records]


def _drop(names: frozenset[str], row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in names}


def select_rows(records: Sequence[dict[str, Any]], keep: Callable[[dict[str, Any]], bool]
                ) -> Sequence[dict[str, Any]]:
    """The records for which ``keep`` holds, in order: of :class:`StoredRows`, another
    ``StoredRows`` (one pass that reads each row once and keeps none); of a list, a list."""
    if isinstance(records, StoredRows):
        return records.pick([i for i, row in enumerate(records) if keep(row)])
    return [row for row in records if keep(row)]


class Column(Sequence[Any]):
    """The values of one field of ``records``, read when asked for (``records[i][name]``),
    never all held at once."""

    def __init__(self, records: Sequence[dict[str, Any]], name: str) -> None:
        self.records, self.name = records, name

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> Column: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Column(self.records[index], self.name)
        return self.records[index][self.name]

    def __iter__(self) -> Iterator[Any]:
        return (row[self.name] for row in self.records)


__all__ = ["KEY_FIELD", "Column", "Convert", "Row", "StoredRows", "row_key", "select_rows",
           "without_fields"]
