"""Loading example files (JSONL or CSV) with errors that name the file, line and field (SPEC §9).

Everything is checked before any model is loaded.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError


@dataclass(frozen=True)
class Row:
    """One example: its fields, the file it came from and its 1-based line number."""

    fields: Mapping[str, Any]
    file: str
    line: int

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def text(self, name: str, *, allow_empty: bool = False) -> str:
        """A required string field; a clear error when missing, not a string, or empty."""
        if name not in self.fields or self.fields[name] is None:
            raise InputError("missing field", file=self.file, line=self.line, field=name)
        value = self.fields[name]
        if not isinstance(value, str):
            raise InputError(f"must be a string, got {type(value).__name__}", file=self.file,
                             line=self.line, field=name)
        if not allow_empty and not value.strip():
            raise InputError("is empty", file=self.file, line=self.line, field=name)
        return value


def demo_path(name: str) -> Path:
    """Path of a bundled demo file (``src/ctxleak/data/demo``)."""
    return Path(str(resources.files("ctxleak") / "data" / "demo" / name))


def read_rows(path: Any, *, rename: Mapping[str, str] | None = None,
              required: Sequence[str] = ()) -> list[Row]:
    """Read examples into rows: a ``.jsonl``/``.json`` (one object per line), ``.csv``/``.tsv``
    or ``.parquet`` file, a ``datasets`` ``save_to_disk`` folder, or rows in memory (a list of
    dicts, a pandas DataFrame, a ``datasets.Dataset``; see :mod:`ctxleak.run.inputs`).

    ``rename`` maps the file's field names to ctxleak's (e.g. ``{"article": "context"}``).
    ``required`` fields must be present (they may still be empty; see :meth:`Row.text`).
    """
    from ctxleak.run import inputs

    rename = dict(rename or {})
    if not inputs.is_path(path):
        rows, where = inputs.memory_rows(path), inputs.IN_MEMORY
    else:
        path = Path(path)
        where = str(path)
        suffix = path.suffix.lower()
        if inputs.is_dataset_folder(path):
            rows = inputs.dataset_folder_rows(path)
        elif not check_input_file(path):
            raise InputError("file not found", file=where)
        elif suffix in (".jsonl", ".json", ".ndjson"):
            rows = _read_jsonl(path)
        elif suffix in (".csv", ".tsv"):
            rows = _read_csv(path, "\t" if suffix == ".tsv" else ",")
        elif suffix == ".parquet":
            rows = inputs.parquet_rows(path)
        else:
            raise InputError("unknown file type: use .jsonl, .csv, .parquet or a datasets "
                             "folder", file=where)
    out = []
    for line, fields in rows:
        fields = {rename.get(k, k): v for k, v in fields.items()}
        for name in required:
            if name not in fields:
                raise InputError("missing field", file=where, line=line, field=name)
        out.append(Row(fields=fields, file=where, line=line))
    if not out:
        raise InputError("no examples in the file" if where != inputs.IN_MEMORY
                         else "no examples in the data", file=where)
    return out


MAX_LINE_BYTES_ENV = "CTXLEAK_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 2 * 1024 * 1024  # a context of about 500k tokens


def max_line_bytes() -> int:
    """The largest input line (or text file) accepted, in bytes: ``$CTXLEAK_MAX_LINE_BYTES``,
    default 2 MiB. Longer lines are refused before they are parsed or tokenised (a 50 MB context
    would otherwise take gigabytes of memory before the window cut)."""
    import os

    raw = os.environ.get(MAX_LINE_BYTES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{MAX_LINE_BYTES_ENV} must be a positive integer, not '{raw}'"
                          ) from None
    if value < 1:
        raise ConfigError(f"{MAX_LINE_BYTES_ENV} must be a positive integer, not '{raw}'")
    return value


def check_input_file(path: str | Path) -> Path:
    """An existing regular file, or an error that says which of missing / a folder it is."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder, not a file", file=str(path))
    if not path.is_file():
        raise InputError("file not found", file=str(path))
    return path


def json_error_message(exc: json.JSONDecodeError) -> str:
    """``not valid JSON (Expecting value at column 3)``; JSON's own messages that already end
    in 'at' ('Invalid control character at') are not doubled."""
    msg = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
    return f"not valid JSON ({msg} at column {exc.colno})"


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of each line of a UTF-8 file (line ends kept); a line that is not
    UTF-8 or longer than :func:`max_line_bytes` is an error naming the file and line."""
    path = check_input_file(path)
    limit = max_line_bytes()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if len(raw) > limit:
                raise InputError(f"line is {len(raw):,} bytes, over the input limit of "
                                 f"{limit:,} (set {MAX_LINE_BYTES_ENV} to raise it)",
                                 file=str(path), line=number)
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of "
                                 "the line)", file=str(path), line=number) from None


def read_text_file(path: str | Path) -> str:
    """A whole UTF-8 text file (``--context @FILE``), with the same checks as data files."""
    return "".join(text for _, text in text_lines(path))


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(line_number, parsed_value)`` for each non-blank line of a JSONL file; errors name the
    file (missing, a folder, CSV) and the line (not UTF-8, too long, not valid JSON)."""
    path = check_input_file(path)
    if path.suffix.lower() in (".csv", ".tsv"):
        raise InputError("is a CSV file: this input must be JSONL (one JSON object per line)",
                         file=str(path))
    for number, text in text_lines(path):
        if not text.strip():
            continue
        try:
            value = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise InputError(json_error_message(exc), file=str(path), line=number) from None
        except _DuplicateKey as exc:
            raise InputError("appears twice in one object", file=str(path), line=number,
                             field=str(exc)) from None
        yield number, value


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def reject_duplicate_ids(rows: Iterable[tuple[Any, str, int]], field: str = "id") -> None:
    """``(id, file, line)`` per row: an error at the second row that repeats an id (run folders
    key samples by id, so two rows under one id would overwrite each other on resume)."""
    first: dict[Any, int] = {}
    for key, file, line in rows:
        if key in first:
            raise InputError(f"duplicate id {key!r} (first on line {first[key]}); every row "
                             "needs its own id", file=file, line=line, field=field)
        first[key] = line


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, value in read_jsonl(path):
        if not isinstance(value, dict):
            raise InputError("each line must be a JSON object", file=str(path), line=number)
        rows.append((number, value))
    return rows


def _read_csv(path: Path, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    import io

    rows = []
    text = "".join(line for _, line in text_lines(path))  # UTF-8 and size checked per line
    csv.field_size_limit(max(csv.field_size_limit(), max_line_bytes()))
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        if not reader.fieldnames:
            raise InputError("no header row", file=str(path), line=1)
        for record in reader:
            if None in record:
                raise InputError("more values than header columns", file=str(path),
                                 line=reader.line_num)
            rows.append((reader.line_num, dict(record)))
    except csv.Error as exc:
        raise InputError(f"not valid CSV ({exc})", file=str(path), line=reader.line_num) from None
    return rows


def parse_mapping(spec: str | None) -> dict[str, str]:
    """``"article=context,question=query"`` -> ``{"article": "context", "question": "query"}``."""
    if not spec:
        return {}
    out = {}
    for part in spec.split(","):
        if "=" not in part:
            raise InputError(f"field mapping '{part}' must look like file_field=ctxleak_field")
        src, dst = part.split("=", 1)
        out[src.strip()] = dst.strip()
    return out
