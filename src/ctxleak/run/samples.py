"""Reading a run folder's ``samples.jsonl`` (or a shard) back, the same way for ``resume`` and
:func:`ctxleak.load_result`: every line a JSON object with an id, no id twice, and, where the
folder has a manifest, every line the one ctxleak wrote (:mod:`ctxleak.run.manifest`).

A method may declare a row check (:data:`RowCheck`): a function that returns the field and what
is wrong with a row (a response influence that is not the sum of its token influences), or
None. Resume and the loader run it on every stored row they read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    their digests; ``digests``: the SHA-256 of each whole line, blank ones included."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    unrecorded: int = 0
    verified: bool = False
    digests: list[str] = field(default_factory=list, repr=False)

    @property
    def recorded_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """``(line, row)`` of the rows whose digest was written."""
        n = len(self.rows) - self.unrecorded
        return list(zip(self.lines[:n], self.rows[:n]))


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
                     check_row: RowCheck | None = None) -> SampleFile:
    """The rows of a sample file, checked: every line a JSON object with an ``id``, no id twice
    (two different results under one id, one of which would be silently kept); with ``verify``
    (default: when the folder has a manifest) every line the one ctxleak wrote. A last line
    without its line end was cut by an interrupted write: it is dropped. With ``repair``
    (resume) that line, and a last line whose digest was not yet written, are cut from the file
    (they are measured again). ``check_row`` (a method's :data:`RowCheck`) runs on every row
    before the digests are compared, so that an edit it catches is named with its field. Any
    other bad line is an error naming the file and line, and nothing is cut."""
    path = Path(path)
    if verify is None:
        verify = has_manifest(path.parent)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    sizes: list[int] = []
    digests: list[str] = []
    first: dict[Any, int] = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                break  # a line cut by an interrupted write: dropped and rewritten
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
            rows.append(row)
            lines.append(number)
    check_rows(path, list(zip(lines, rows)), check_row)
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
            return SampleFile(rows[:-1], lines[:-1], 0, verify, digests[:-1])
    return SampleFile(rows, lines, unrecorded, verify, digests)


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


def check_rows(path: Path, rows: list[tuple[int, dict[str, Any]]],
               check: RowCheck | None) -> None:
    """Run a method's row check on ``(line, row)`` pairs of ``path``: the first problem is an
    :class:`EditedRunError` naming the file, line and field."""
    if check is None:
        return
    for line, row in rows:
        problem = check(row)
        if problem is not None:
            raise EditedRunError(problem[1], file=str(path), line=line, field=problem[0])


__all__ = ["KEY_FIELD", "RowCheck", "RowProblem", "SampleFile", "check_rows", "digests_file",
           "has_manifest", "read_sample_file", "read_samples", "row_key"]
