"""Reading a run folder's ``samples.jsonl`` (or a shard) back, the same way for ``resume`` and
:func:`ctxleak.load_result`: every line a JSON object with an id, no id twice, and, where the
folder has a manifest, every line the one ctxleak wrote (:mod:`ctxleak.run.manifest`).

A method may declare a row check (:data:`RowCheck`): a function that returns the field and what
is wrong with a row (a response influence that is not the sum of its token influences), or
None. Resume and the loader run it on every stored row they read.

The rows read back on demand (:class:`StoredRows`, :func:`row_key`, :class:`Column`, ...) are
:mod:`ctxleak.run.stored`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxleak.errors import EditedRunError, InputError
from ctxleak.run.manifest import (
    MANIFEST_FILE,
    check_lines,
    digest,
    settle_lines,
)
from ctxleak.run.records import parse_json
from ctxleak.run.stored import (
    KEY_FIELD,
    StoredRows,
    row_key,
)

#: A row's problem: ``(field, what is wrong)``.
RowProblem = tuple[str, str]
#: A method's check of one stored row (``samples.jsonl`` line): its problem, or None.
RowCheck = Callable[[Mapping[str, Any]], "RowProblem | None"]


class Scrub(Protocol):
    """What a run folder's records and summary go through before they are written: the face's
    masking of the run's secrets (:mod:`ctxleak.report.forwarding`)."""

    def record(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` as written (its values found, then masked)."""
        ...

    def value(self, value: Any, key: str = "") -> Any:
        """``value`` (the summary) with the values found so far masked."""
        ...


#: The full config of a run -> its :class:`Scrub` (None: records written as measured).
Scrubbing = Callable[[dict[str, Any]], "Scrub | None"]


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
