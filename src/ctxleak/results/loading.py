"""Reading a run folder back: :func:`load_result`, every file checked, each problem naming the
file, line and field.

Three kinds of check, in this order: the files are what ctxleak writes (JSON objects, numbers
where numbers go, the samples ``results.json`` summarised); the numbers are what the method
guarantees (its :class:`~ctxleak.methods.checks.RecordChecks`: ranges and cross-checks, which
pin down the field); and every file the Result is read from is the one ctxleak wrote (the
folder's manifest, :mod:`ctxleak.run.manifest`, which pins down the line)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ctxleak.errors import EditedRunError, InputError, warn
from ctxleak.methods.checks import find, is_number
from ctxleak.methods.verdict import check_units, check_verdict
from ctxleak.results.base import Result
from ctxleak.results.methods import result_class
from ctxleak.run.inputs import non_finite
from ctxleak.run.manifest import MANIFEST_FILE, check_file, check_lines, read_manifest
from ctxleak.run.rundir import (
    CONFIG_FILE,
    KEY_FIELD,
    RESULTS_FILE,
    SAMPLES_FILE,
    read_json_file,
)
from ctxleak.run.samples import (
    SampleFile,
    check_rows,
    has_manifest,
    read_sample_file,
)
from ctxleak.run.stored import StoredRows


def load_result(directory: str | os.PathLike[str], *, strict: bool = True) -> Result:
    """Read back any run directory (written by the CLI or the API) as its typed Result.

    What is loaded is checked, each problem an :class:`InputError` naming the file, line and
    field: ``results.json`` and ``config.json`` must be the JSON objects ctxleak writes, with
    numbers where the summary holds numbers (finite: ctxleak stores null for a value it could
    not compute); ``samples.jsonl`` is read as ``resume`` reads it (every line an object with
    an id, no id twice) and must hold the samples that ``results.json`` says it summarised
    (``sample_ids``, or for run folders written before them, ``n_effective`` rows); rows beyond
    those (kept from a run with a larger ``limit``) are left out with a warning.

    Edits are :class:`~ctxleak.errors.EditedRunError`: a number out of its method's range or
    at odds with another (a response influence that is not the sum of its token influences),
    and, in a folder with a manifest, a file or a sample line whose SHA-256 is not the one
    ctxleak recorded. ``strict=False`` turns those into warnings and loads the folder as it is
    (say, after redacting a response by hand). A folder without a manifest (an older ctxleak's)
    loads with a warning that it is unverified."""
    path = Path(directory)
    results_path = path / RESULTS_FILE
    if not results_path.is_file():
        raise InputError("not a finished run directory (no results.json)", file=str(path))
    body = _json_object(results_path, read_json_file(results_path), "")
    for key in ("summary", "config", "provenance"):
        _json_object(results_path, body.get(key) or {}, key)
    config = body.get("config") or {}
    if not config and (path / CONFIG_FILE).is_file():
        config = _json_object(path / CONFIG_FILE, read_json_file(path / CONFIG_FILE), "")
    cls = result_class(str(config.get("command")))
    summary = body.get("summary") or {}
    _check_numbers(results_path, summary, cls.numeric_fields)
    _check_reading(results_path, summary)
    n_effective = _count(results_path, body.get("n_effective"), "n_effective")
    wall = body.get("wall_time_s")
    if wall is not None and not is_number(wall):
        raise InputError(f"must be a number, got {wall!r}", file=str(results_path),
                         field="wall_time_s")
    samples = path / SAMPLES_FILE
    stored = read_sample_file(samples, verify=False, keep_rows=False) if samples.is_file() \
        else SampleFile()
    records = _summarised(path, stored, body, n_effective, config)
    images = {p.name: p.read_bytes() for p in sorted(path.glob("*.png"))}
    result = cls(records=records, summary=summary, config=config,
                 provenance=body.get("provenance") or {}, path=path, n_effective=n_effective,
                 wall_time_s=wall, images=images)
    try:
        result.table()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"the summary is not as ctxleak writes it ({type(exc).__name__}: "
                         f"{exc})", file=str(results_path), field="summary") from None
    with _reported(strict):
        _check_edits(path, cls, summary, stored, set(records.keys))
    return result


@contextmanager
def _reported(strict: bool) -> Iterator[None]:
    """Inside: an :class:`EditedRunError` raised (``strict``) or warned, the load going on."""
    try:
        yield
    except EditedRunError as exc:
        if strict:
            raise
        warn(f"{exc} (loaded anyway: strict=False)")


def _check_edits(path: Path, cls: type[Result], summary: dict[str, Any], stored: SampleFile,
                 summarised: set[Any]) -> None:
    """The summary's numbers (finite, in their ranges), the summarised rows (the method's
    checks), then the manifest: the sample lines' digests, then those of the files the Result
    is read from (``config.json``, ``results.json``, ``report.html``, the figures)."""
    results_path, samples = path / RESULTS_FILE, path / SAMPLES_FILE
    bad = non_finite(summary, "summary")
    if bad is not None:
        raise EditedRunError("not a finite number: ctxleak writes null where a value could "
                             "not be computed, so this was changed after the run",
                             file=str(results_path), field=bad)
    checks = cls.checks
    if checks is not None:
        problem = checks.summary_problem(summary)
        if problem:
            raise EditedRunError(problem[1], file=str(results_path), field=problem[0])
        rows = stored.stored_rows()
        check_rows(samples, ((n, rows[i]) for i, n in enumerate(stored.lines)
                             if stored.keys[i] in summarised), checks.row_problem)
    if not has_manifest(path):
        warn(f"{path}: unverified: no {MANIFEST_FILE} (written by a ctxleak that kept none), "
             "so an edit after the run cannot be told apart; only the numbers' own checks ran")
        return
    manifest = read_manifest(path) or {}
    if samples.is_file():
        cut, _ = check_lines(samples, stored.digests)
        if cut and stored.lines and stored.lines[-1] == len(stored.digests) \
                and stored.keys[-1] in summarised:
            raise EditedRunError("this line has no SHA-256 in the line digests: added after "
                                 "ctxleak wrote the file", file=str(samples),
                                 line=stored.lines[-1])
    for name in (CONFIG_FILE, RESULTS_FILE):
        check_file(path, manifest, name, required=True)
    for name in ("report.html", *sorted(p.name for p in path.glob("*.png"))):
        check_file(path, manifest, name, required=False)  # what the Result shows


def user_id_row(command: str, row: dict[str, Any]) -> dict[str, Any]:
    """A sample row of a run folder written before rows kept the user's ``id`` apart from their
    ``key``, as rows are written now: the old ``id`` (``hr|lambda=1,T=0.8,context=all``,
    ``shots=4/q=17``, ``mode|variant|group|k1|subject|type|template``) becomes the ``key`` and
    the user's id, read back from the row's own columns, the ``id``. Other rows are returned
    as they are."""
    old = row.get("id")
    if KEY_FIELD in row or not isinstance(old, str):
        return row
    user: Any = None
    if command == "influence" and isinstance(row.get("setting"), str) \
            and old.endswith("|" + row["setting"]):
        user = old[:-len(row["setting"]) - 1]
    elif command == "icl" and old.startswith("shots=") and "query_index" in row:
        user = str(row["query_index"])
    elif command == "probe" and "|" in old and "subject" in row:
        user = row["subject"]
    if user is None:
        return row
    return {"id": user, KEY_FIELD: old, **{k: v for k, v in row.items() if k != "id"}}


def _json_object(file: Path, value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"must be a JSON object, got {type(value).__name__}", file=str(file),
                         field=field or None)
    return value


def _count(file: Path, value: Any, field: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 0):
        raise InputError(f"must be a count (an integer >= 0), got {value!r}", file=str(file),
                         field=field)
    return value


def _check_numbers(file: Path, summary: dict[str, Any], patterns: tuple[str, ...]) -> None:
    """Every value at one of ``patterns`` (``settings.*.n``) is a number or null."""
    for pattern in patterns:
        for where, value in find(summary, pattern, "summary"):
            if value is not None and not is_number(value):
                raise InputError(f"must be a number, got {value!r}", file=str(file),
                                 field=where)


def _check_reading(file: Path, summary: dict[str, Any]) -> None:
    """A stored ``verdict`` (text and rule, strings) and ``units`` (names to strings) are as
    :mod:`ctxleak.methods.verdict` makes them; run folders written before them have neither."""
    for key, check in (("verdict", check_verdict), ("units", check_units)):
        if key in summary:
            problem = check(summary[key])
            if problem:
                raise InputError(problem, file=str(file), field=f"summary.{key}")


def _summarised(path: Path, stored: SampleFile, body: dict[str, Any],
                n_effective: int | None, config: dict[str, Any]) -> StoredRows:
    """The rows of ``samples.jsonl`` the summary was computed from, in their order, read from
    the file on demand (:class:`~ctxleak.run.stored.StoredRows`; rows of an older run folder
    as :func:`user_id_row` gives them)."""
    samples, results = path / SAMPLES_FILE, path / RESULTS_FILE
    command = str(config.get("command"))
    rows = stored.stored_rows()
    ids = body.get("sample_ids")
    if ids is None:  # a run folder written before results.json listed its samples
        if n_effective is not None and config.get("command") != "influence-explain" \
                and len(rows) != n_effective:
            raise InputError(f"holds {len(rows)} sample rows, but results.json summarised "
                             f"n_effective = {n_effective}", file=str(samples))
        return _as_loaded(rows, range(len(rows)), command)
    if not isinstance(ids, list) or any(not isinstance(i, (str, int)) or isinstance(i, bool)
                                        for i in ids):
        raise InputError("must be a list of sample ids", file=str(results), field="sample_ids")
    if n_effective is not None and len(ids) != n_effective:
        raise InputError(f"lists {len(ids)} ids, but n_effective = {n_effective}",
                         file=str(results), field="sample_ids")
    by_id = {key: i for i, key in enumerate(stored.keys)}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise InputError(f"has no row with id {missing[0]!r} ({len(missing)} of the "
                         f"{len(ids)} samples results.json summarised are missing)",
                         file=str(samples))
    if len(set(ids)) != len(ids):
        raise InputError("lists an id twice", file=str(results), field="sample_ids")
    extra = len(rows) - len(ids)
    if extra:
        warn(f"{samples}: {extra} row(s) that results.json did not summarise (kept "
             "from an earlier run with a larger limit, or added since) are left out")
    return _as_loaded(rows, [by_id[i] for i in ids], command)


def _as_loaded(rows: StoredRows, picked: Sequence[int], command: str) -> StoredRows:
    """The rows at ``picked``, each as :func:`user_id_row` gives it back."""
    return rows.pick(picked, convert=partial(_loaded_row, command))


def _loaded_row(command: str, tag: Any, row: dict[str, Any]) -> dict[str, Any]:
    return user_id_row(command, row)

