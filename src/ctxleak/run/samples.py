"""Reading a run folder's ``samples.jsonl`` (or a shard) back, the same way for ``resume`` and
:func:`ctxleak.load_result`: every line a JSON object with an id, no id twice, and, where the
folder has a manifest, every line the one ctxleak wrote (:mod:`ctxleak.run.manifest`).

A method may declare a row check (:data:`RowCheck`): a function that returns the field and what
is wrong with a row (a response influence that is not the sum of its token influences), or
None. Resume and the loader run it on every stored row they read.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, overload

from ctxleak.errors import EditedRunError, InputError
from ctxleak.run.manifest import (
    MANIFEST_FILE,
    check_lines,
    digest,
    digests_file,
    settle_lines,
)
from ctxleak.run.records import parse_json

KEY_FIELD = "key"

#: A row's problem: ``(field, what is wrong)``.
RowProblem = tuple[str, str]
#: A method's check of one stored row (``samples.jsonl`` line): its problem, or None.
RowCheck = Callable[[Mapping[str, Any]], "RowProblem | None"]


def row_key(row: Mapping[str, Any]) -> Any:
    """The name a sample row is stored under in its run folder, what resume, shard merging and
    ``sample_ids`` go by: its ``key`` where the method names the item apart from the user's
    ``id`` (one example measured under several settings: ``hr|lambda=1,T=0.8,context=all``),
    else its ``id`` (rows of older run folders, whose ``id`` was that name)."""
    return row[KEY_FIELD] if KEY_FIELD in row else row.get("id")


@dataclass(frozen=True)
class SampleFile:
    """The rows of one sample file: ``lines[i]`` is the line of ``rows[i]``; the last
    ``unrecorded`` rows (0 or 1) were appended but their digest not yet written (a kill between
    the two: resume measures that example again); ``verified``: the lines were checked against
    their digests; ``digests``: the SHA-256 of each whole line, blank ones included.

    ``keys[i]``, ``offsets[i]`` and ``sizes[i]``: the name (:func:`row_key`), the byte offset
    and the byte length of row i's line, so that :class:`StoredRows` reads it back on demand;
    read with ``keep_rows=False``, ``rows`` is empty and only those are kept."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    unrecorded: int = 0
    verified: bool = False
    digests: list[str] = field(default_factory=list, repr=False)
    keys: list[Any] = field(default_factory=list, repr=False)
    offsets: list[int] = field(default_factory=list, repr=False)
    sizes: list[int] = field(default_factory=list, repr=False)
    path: Path | None = None

    @property
    def recorded_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """``(line, row)`` of the rows whose digest was written."""
        n = len(self.rows) - self.unrecorded
        return list(zip(self.lines[:n], self.rows[:n]))

    @property
    def recorded(self) -> int:
        """How many rows (the first ones) had their digest written."""
        return len(self.keys) - self.unrecorded

    def stored_rows(self, count: int | None = None) -> StoredRows:
        """The first ``count`` rows (default: all) as a :class:`StoredRows`, read on demand."""
        n = len(self.keys) if count is None else count
        if self.path is None:
            return StoredRows([], [], [], [], [])
        return StoredRows([self.path], self.keys[:n], [0] * n, self.offsets[:n], self.sizes[:n])


Convert = Callable[[Any, dict[str, Any]], dict[str, Any]]


class StoredRows(Sequence[dict[str, Any]]):
    """Rows of sample files read on demand: each row is its name (:func:`row_key`) and its
    line's byte span (file, offset, length), parsed when it is asked for, so a run of any
    length keeps a name and a few integers per row in memory, not the rows. A
    :class:`~collections.abc.Sequence`: ``len``, iteration (any number of times, in order),
    indexing and slicing (a slice is another ``StoredRows``), and equality with any sequence of
    the same rows (a list included).

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


def has_manifest(folder: Path) -> bool:
    """Whether a run folder has a manifest; one that has line digests but lost its manifest
    is an :class:`EditedRunError` (the manifest was removed)."""
    if (folder / MANIFEST_FILE).is_file():
        return True
    stray = sorted(folder.glob(".samples*.jsonl.sha256"))
    if stray:
        raise EditedRunError(f"{MANIFEST_FILE} is missing although {stray[0].name} is there: "
                             "the manifest was removed after ctxleak wrote the folder",
                             file=str(folder))
    return False


def read_sample_file(path: Path, *, repair: bool = False, verify: bool | None = None,
                     check_row: RowCheck | None = None, keep_rows: bool = True) -> SampleFile:
    """The rows of a sample file, checked: every line a JSON object with an ``id``, no id twice
    (two different results under one id, one of which would be silently kept); with ``verify``
    (default: when the folder has a manifest) every line the one ctxleak wrote. A last line
    without its line end was cut by an interrupted write: it is dropped. With ``repair``
    (resume) that line, and a last line whose digest was not yet written, are cut from the file
    (they are measured again). ``check_row`` (a method's :data:`RowCheck`) runs on every row
    before the digests are compared, so that an edit it catches is named with its field. Any
    other bad line is an error naming the file and line, and nothing is cut.

    ``keep_rows=False``: the rows are checked as they are read but not kept (``rows`` is
    empty); their names, offsets and sizes are, for :meth:`SampleFile.stored_rows`."""
    path = Path(path)
    if verify is None:
        verify = has_manifest(path.parent)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    keys: list[Any] = []
    offsets: list[int] = []
    row_sizes: list[int] = []
    sizes: list[int] = []
    digests: list[str] = []
    first: dict[Any, int] = {}
    at = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                break  # a line cut by an interrupted write: dropped and rewritten
            start, at = at, at + len(raw)
            sizes.append(len(raw))
            digests.append(digest(raw))
            if not raw.strip():
                continue
            row = _row(path, number, raw)
            key = row_key(row)
            if key in first:  # never silently keep one of two different results
                name = KEY_FIELD if KEY_FIELD in row else "id"
                raise InputError(f"two rows with {name} {key!r} (first on line {first[key]}); "
                                 "start a new run folder", file=str(path), line=number,
                                 field=name)
            first[key] = number
            if keep_rows:
                rows.append(row)
            lines.append(number)
            keys.append(key)
            offsets.append(start)
            row_sizes.append(len(raw))
    del first
    stored = SampleFile(rows, lines, 0, verify, digests, keys, offsets, row_sizes, path)
    check_rows(path, zip(lines, rows if keep_rows else stored.stored_rows()), check_row)
    cut, pending = check_lines(path, digests) if verify else (0, False)
    unrecorded = 1 if cut and lines and lines[-1] == len(sizes) else 0  # not a blank line
    if repair:
        good = sum(sizes[:len(sizes) - cut])
        if good != path.stat().st_size:
            with open(path, "r+b") as f:
                f.truncate(good)
        if verify:
            settle_lines(path, len(sizes) - cut, pending)
        if unrecorded:
            return SampleFile(rows[:-1], lines[:-1], 0, verify, digests[:-1], keys[:-1],
                              offsets[:-1], row_sizes[:-1], path)
    return SampleFile(rows, lines, unrecorded, verify, digests, keys, offsets, row_sizes, path)


def _row(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=str(path), line=number) from None
    row = parse_json(text, file=str(path), line=number, allow_nan=True)
    if not isinstance(row, dict) or "id" not in row:
        raise InputError("not a sample row (a JSON object with an id)", file=str(path),
                         line=number)
    for name in ("id", KEY_FIELD) if KEY_FIELD in row else ("id",):
        value = row[name]
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise InputError(f"must be a string or an integer, got {type(value).__name__}",
                             file=str(path), line=number, field=name)
    return row


def read_samples(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The rows of :func:`read_sample_file` whose digest was written (all, in a folder without
    a manifest)."""
    return [row for _, row in read_sample_file(path, repair=repair).recorded_rows]


def check_rows(path: Path, rows: Iterable[tuple[int, dict[str, Any]]],
               check: RowCheck | None) -> None:
    """Run a method's row check on ``(line, row)`` pairs of ``path``: the first problem is an
    :class:`EditedRunError` naming the file, line and field."""
    if check is None:
        return
    for line, row in rows:
        problem = check(row)
        if problem is not None:
            raise EditedRunError(problem[1], file=str(path), line=line, field=problem[0])


__all__ = ["KEY_FIELD", "Column", "Row", "RowCheck", "RowProblem", "SampleFile", "StoredRows",
           "check_rows", "digests_file", "has_manifest", "read_sample_file", "read_samples",
           "row_key", "select_rows", "without_fields"]
