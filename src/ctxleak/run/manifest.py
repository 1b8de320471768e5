"""A run folder's manifest: the SHA-256 of what ctxleak wrote there, so that a file changed
afterwards (a hand-edited number, a line deleted or added) is reported when the folder is loaded
or resumed instead of being used.

Two records, both hidden files of the folder:

- ``.ctxleak-manifest.json``, ``{"format": 1, "files": {name: {"sha256": hex}}}``, for the files
  written whole (``config.json``, ``results.json``, ``report.html``, the figures...). Only the
  folder's main process writes it, atomically, around each file it writes
  (:func:`write_recorded`): first the entry with the new digest and, when the file changes, the
  old one as ``before``; then the file; then the entry without ``before``. A kill at any point
  leaves a file whose digest is one the entry accepts.
- ``.samples.jsonl.sha256`` beside each sample file (shards too): the SHA-256 of each of its
  lines, one hex digest a line, in the same order. A sample line is appended and fsynced, then
  its digest (:func:`append_digest`): one more short line per example. A kill between the two
  leaves one last sample line without its digest: not yet recorded, so ``--resume`` cuts it and
  measures that example again. A sample file written whole (shards merged, ``Result.save``)
  gets its digests first in ``.samples.jsonl.sha256.next``, then the file, then the digests
  renamed over the old ones: a kill between leaves a file that one of the two lists matches.

What it detects: a file or a line changed, added or deleted after ctxleak wrote it, by accident
or by a casual edit. What it does not: someone who edits a file and recomputes its digests (the
manifest is not signed), and files ctxleak never wrote. A folder without a manifest (written by
a ctxleak before 0.1.0 kept one) is not verified, and stays so when resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxleak.engine import model_files
from ctxleak.errors import EditedRunError
from ctxleak.run.atomic import append_whole, write_atomic

MANIFEST_FILE = ".ctxleak-manifest.json"
FORMAT = 1
EDITED = "changed after ctxleak wrote it"


def digest(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (input files are hashed into config.json for resume)."""
    return model_files.file_sha256(Path(path))


def digests_file(samples: Path) -> Path:
    """The file of ``samples``' line digests (``.samples.jsonl.sha256``)."""
    return samples.with_name(f".{samples.name}.sha256")


def pending_file(samples: Path) -> Path:
    """The line digests of a sample file being written whole, until it is."""
    return samples.with_name(f".{samples.name}.sha256.next")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest, None where it has none; one that is not as ctxleak writes it is
    an :class:`EditedRunError` naming it."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise EditedRunError(f"not the manifest ctxleak writes ({type(exc).__name__}): "
                             f"{EDITED}", file=str(path)) from None
    if not isinstance(body, dict) or not isinstance(body.get("files"), dict) or any(
            not isinstance(e, dict) or not isinstance(e.get("sha256"), str)
            for e in body["files"].values()):
        raise EditedRunError(f"not the manifest ctxleak writes: {EDITED}", file=str(path))
    return body


def _save(folder: Path, body: dict[str, Any], mode: int) -> None:
    write_atomic(Path(folder) / MANIFEST_FILE,
                 json.dumps(body, indent=1, sort_keys=True) + "\n", mode)


def start_manifest(folder: Path, mode: int) -> None:
    """Give a folder an empty manifest, where it has none."""
    if not (Path(folder) / MANIFEST_FILE).exists():
        _save(folder, {"format": FORMAT, "files": {}}, mode)


def write_recorded(folder: Path, name: str, data: str | bytes, mode: int) -> None:
    """Write ``name`` in ``folder`` whole (:func:`write_atomic`) and, when the folder has a
    manifest, record its SHA-256 there, crash-safe (see the module docstring)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = Path(folder)
    body = read_manifest(folder)
    if body is None:
        write_atomic(folder / name, raw, mode)
        return
    new = digest(raw)
    path = folder / name
    before = file_sha256(path) if path.is_file() else None
    entry: dict[str, str] = {"sha256": new}
    pending = {**entry, "before": before} if before not in (None, new) else entry
    if body["files"].get(name) != pending:
        body["files"][name] = pending
        _save(folder, body, mode)
    write_atomic(path, raw, mode)
    if pending != entry:
        body["files"][name] = entry
        _save(folder, body, mode)


def check_file(folder: Path, body: dict[str, Any], name: str, *, required: bool) -> None:
    """Refuse ``name`` when its SHA-256 is not the one its manifest entry accepts, or (when
    ``required``) when it exists but the manifest does not list it. A listed file that is
    absent is left to the caller."""
    path = Path(folder) / name
    if not path.is_file():
        return
    entry = body["files"].get(name)
    if entry is None:
        if required:
            raise EditedRunError(f"not written by ctxleak: {MANIFEST_FILE} does not list it",
                                 file=str(path))
        return
    if file_sha256(path) not in (entry["sha256"], entry.get("before")):
        raise EditedRunError(f"{EDITED} (its SHA-256 is not the one {MANIFEST_FILE} "
                             "recorded)", file=str(path))


def _whole_lines(path: Path) -> tuple[list[str], int] | None:
    """The digests of a digests file and the bytes of its whole lines (a last line cut by a
    kill is not counted), None where there is no such file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    whole = data[:data.rfind(b"\n") + 1]
    return whole.decode("ascii", "replace").splitlines(), len(whole)


def check_lines(samples: Path, mine: Sequence[str]) -> tuple[int, bool]:
    """Check the digests ``mine`` of the whole lines of ``samples`` against the recorded ones:
    ``(unrecorded, pending)``, the number of last lines (0 or 1) whose digest was not yet
    written, and whether the digests of an interrupted whole write are the ones that match. A
    line changed, deleted or added is an :class:`EditedRunError` naming the file and line."""
    mine = list(mine)
    lists = [(_whole_lines(digests_file(samples)), False),
             (_whole_lines(pending_file(samples)), True)]
    found = [(got[0], pending) for got, pending in lists if got is not None]
    if not found:
        if not mine:
            return 0, False
        raise EditedRunError(f"its line digests ({digests_file(samples).name}) are missing: "
                             f"the file was replaced or {EDITED}", file=str(samples))
    for recorded, pending in found:
        n = len(recorded)
        if len(mine) in (n, n + 1) and mine[:n] == recorded:
            return len(mine) - n, pending
    recorded = found[0][0]
    for number, (got, want) in enumerate(zip(mine, recorded), start=1):
        if got != want:
            raise EditedRunError(f"{EDITED} (the line's SHA-256 is not the one recorded in "
                                 f"{digests_file(samples).name})", file=str(samples),
                                 line=number)
    if len(mine) < len(recorded):
        raise EditedRunError(f"ctxleak wrote {len(recorded)} lines, {len(mine)} are left: "
                             f"line {len(mine) + 1} and after were deleted", file=str(samples),
                             line=len(mine) + 1)
    raise EditedRunError(f"lines {len(recorded) + 1} to {len(mine)} have no SHA-256 in "
                         f"{digests_file(samples).name}: added after ctxleak wrote the file",
                         file=str(samples), line=len(recorded) + 1)


def settle_lines(samples: Path, n_lines: int, pending: bool) -> None:
    """After :func:`check_lines` on resume: the digests of an interrupted whole write become
    the file's, and the digests file keeps its first ``n_lines`` whole lines only."""
    if pending:
        os.replace(pending_file(samples), digests_file(samples))
    else:
        pending_file(samples).unlink(missing_ok=True)
    got = _whole_lines(digests_file(samples))
    if got is not None:
        size = sum(len(d) + 1 for d in got[0][:n_lines])
        if size != digests_file(samples).stat().st_size:
            with open(digests_file(samples), "r+b") as f:
                f.truncate(size)


def open_digests(samples: Path, mode: int) -> int:
    """The digests file of ``samples``, opened to append."""
    return os.open(digests_file(samples), os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)


def append_digest(fd: int, line: bytes) -> None:
    """Append the digest of one sample line (already appended and fsynced) to its digests
    file ``fd``, fsynced; a refused write is cut back (:func:`append_whole`) and re-raised."""
    append_whole(fd, (digest(line) + "\n").encode("ascii"))


def write_lines_whole(samples: Path, data: str | bytes, mode: int) -> None:
    """Write a sample file whole with its line digests (crash-safe: the module docstring)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    lines = raw.splitlines(keepends=True)
    write_atomic(pending_file(samples), "".join(digest(r) + "\n" for r in lines), mode)
    write_atomic(samples, raw, mode)
    os.replace(pending_file(samples), digests_file(samples))
