"""Loading example files (JSONL or CSV) with errors that name the file, line and field.

Everything is checked before any model is loaded.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.run import inputs


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
    return list(iter_rows(path, rename=rename, required=required))


def iter_rows(path: Any, *, rename: Mapping[str, str] | None = None,
              required: Sequence[str] = ()) -> Iterator[Row]:
    """:func:`read_rows` one row at a time: a JSONL file is parsed line by line as the rows are
    taken, so a caller that keeps less than the rows (a query log's turns) never holds the whole
    file as parsed JSON. The same errors, raised when the row at fault is reached."""
    rename = dict(rename or {})
    rows: Iterable[tuple[int, Mapping[str, Any]]]
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
    count = 0
    for line, fields in rows:
        fields = {rename.get(k, k): v for k, v in fields.items()}
        for name in required:
            if name not in fields:
                raise InputError("missing field", file=where, line=line, field=name)
        count += 1
        yield Row(fields=fields, file=where, line=line)
    if not count:
        raise InputError("no examples in the file" if where != inputs.IN_MEMORY
                         else "no examples in the data", file=where)


MAX_LINE_BYTES_ENV = "CTXLEAK_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 2 * 1024 * 1024  # a context of about 500k tokens


def max_line_bytes() -> int:
    """The largest input line (or text file) accepted, in bytes: ``$CTXLEAK_MAX_LINE_BYTES``,
    default 2 MiB. Longer lines are refused before they are parsed or tokenised (a 50 MB context
    would otherwise take gigabytes of memory before the window cut)."""
    raw = os.environ.get(MAX_LINE_BYTES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{MAX_LINE_BYTES_ENV} must be a positive integer, not '{raw}'")
    return value


def check_input_file(path: str | Path) -> Path:
    """An existing regular file, or an error that says what it is instead: missing, a folder, or
    a device, pipe or socket (``/dev/zero`` would never end; a pipe can be read only once, and
    resume hashes the input to check that it did not change)."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder, not a file", file=str(path))
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", file=str(path)) from None
    if not stat.S_ISREG(mode):
        raise InputError(f"is {_file_kind(mode)}, not a regular file: save the data to a file "
                         "and pass that", file=str(path))
    return path


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def json_error_message(exc: json.JSONDecodeError) -> str:
    """``not valid JSON (Expecting value at column 3)``; JSON's own messages that already end
    in 'at' ('Invalid control character at') are not doubled."""
    msg = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
    return f"not valid JSON ({msg} at column {exc.colno})"


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of each line of a UTF-8 file (line ends kept; a UTF-8 byte-order
    mark, as Excel writes it, dropped); a line that is not UTF-8 or longer than
    :func:`max_line_bytes` is an error naming the file and line. A line is never read past the
    limit, so a file without line breaks costs no more memory than one line."""
    path = check_input_file(path)
    limit = max_line_bytes()
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", file=str(path)) from None
    with f:
        number = 0
        while raw := f.readline(limit + 1):
            number += 1
            if len(raw) > limit:
                raise InputError(f"line is over the input limit of {limit:,} bytes (set "
                                 f"{MAX_LINE_BYTES_ENV} to raise it)", file=str(path),
                                 line=number)
            if number == 1:
                raw = _drop_bom(raw, path)
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of "
                                 "the line)", file=str(path), line=number) from None


def _drop_bom(raw: bytes, path: Path) -> bytes:
    """The first line without its UTF-8 byte-order mark; a UTF-16 file is a clear error."""
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw[3:]
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16, either byte order
        raise InputError("is UTF-16 text: save it as UTF-8 (in Excel: 'CSV UTF-8')",
                         file=str(path), line=1)
    return raw


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
    first = True
    for number, text in text_lines(path):
        if not text.strip():
            continue
        if first and text.lstrip().startswith("[") and not text.rstrip().endswith("]"):
            raise InputError("starts a JSON array over several lines: this input is JSONL, one "
                             "JSON object per line (convert with: jq -c '.[]' FILE)",
                             file=str(path), line=number)
        first = False
        yield number, parse_json(text, file=str(path), line=number)


def parse_json(text: str, *, file: str, line: int | None = None,
               allow_nan: bool = False) -> Any:
    """``text`` parsed as JSON, every failure an :class:`InputError` naming ``file`` and the line
    (``line``, or the one JSON reports for a text of several lines): invalid JSON, a key given
    twice in one object, nesting deeper than the parser's recursion limit (about 1,000 levels),
    an integer of more than 4,300 digits, and ``NaN``/``Infinity`` (not JSON; ctxleak writes
    null) unless ``allow_nan``."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys,
                          parse_constant=None if allow_nan else _no_constant)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        raise InputError(json_error_message(exc), file=file, line=where) from None
    except _DuplicateKey as exc:
        raise InputError("appears twice in one object", file=file, line=line,
                         field=str(exc)) from None
    except _Constant as exc:
        raise InputError(f"not valid JSON ({exc} is not a JSON value: write null or a number)",
                         file=file, line=line) from None
    except RecursionError:
        raise InputError("not readable JSON (arrays or objects nested more deeply than the "
                         "parser's limit of about 1,000 levels)", file=file, line=line) from None
    except ValueError as exc:  # an integer longer than Python's 4,300-digit limit
        raise InputError(f"not readable JSON ({exc})", file=file, line=line) from None


class _DuplicateKey(ValueError):
    pass


class _Constant(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _Constant(name)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def id_key(value: str) -> str:
    """What two ids are compared by: their Unicode NFC form without surrounding spaces, so that
    ``café`` typed precomposed and with a combining accent (which print identically) are one
    id."""
    return unicodedata.normalize("NFC", value).strip()


def example_id(value: Any, *, file: str | None, line: int | None, field: str = "id") -> str:
    """A row's id as text: a string or an integer, not empty, without control characters
    (ids name samples in the run folder and in reports, where they must print as themselves)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"must be a string or an integer, got {type(value).__name__}",
                         file=file, line=line, field=field)
    text = str(value)
    if not text.strip():
        raise InputError("is empty: give every row a non-empty id, or leave the field out to "
                         "number the rows", file=file, line=line, field=field)
    if any(unicodedata.category(c) == "Cc" for c in text):
        raise InputError(f"contains a control character ({text!r})", file=file, line=line,
                         field=field)
    return text


def reject_duplicate_ids(rows: Iterable[tuple[Any, str, int]], field: str = "id") -> None:
    """``(id, file, line)`` per row: an error at the second row that repeats an id, ids compared
    by :func:`id_key` (run folders key samples by id, so two rows under one id would overwrite
    each other on resume)."""
    first: dict[Any, tuple[Any, int]] = {}
    for key, file, line in rows:
        norm = id_key(key) if isinstance(key, str) else key
        if norm in first:
            same = "" if first[norm][0] == key else f", written {first[norm][0]!r} there"
            raise InputError(f"duplicate id {key!r} (first on line {first[norm][1]}{same}); "
                             "every row needs its own id", file=file, line=line, field=field)
        first[norm] = (key, line)


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, value in read_jsonl(path):
        if not isinstance(value, dict):
            raise InputError(f"each line must be a JSON object, got {_json_kind(value)}",
                             file=str(path), line=number)
        yield number, value


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "true/false", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _read_csv(path: Path, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a CSV/TSV file as spreadsheets write it (UTF-8 with or without a byte-order mark,
    CRLF or LF line ends, quoted values over several lines). Refused, naming the line: a header
    that names a column twice (after trimming spaces and Unicode NFC), a value under a column
    without a name, a row with more or fewer values than the header, a quote never closed."""
    text = "".join(line for _, line in text_lines(path))  # UTF-8 and size checked per line
    csv.field_size_limit(max(csv.field_size_limit(), max_line_bytes()))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    where = str(path)
    header: list[str] | None = None
    rows = []
    start = 1
    try:
        for values in reader:
            line, start = start, reader.line_num + 1
            if not values or (header is None and not any(v.strip() for v in values)):
                continue  # a blank line
            if header is None:
                header = _csv_header(values, where, line, delimiter)
                continue
            rows.append((line, _csv_row(values, header, where, line)))
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise InputError("a quoted value opened on this line is never closed (a \" missing)",
                             file=where, line=start) from None
        raise InputError(f"not valid CSV ({exc})", file=where, line=reader.line_num) from None
    if header is None:
        raise InputError("no header row", file=where, line=1)
    return rows


def _csv_header(values: list[str], where: str, line: int, delimiter: str) -> list[str]:
    names = [id_key(v) for v in values]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name and name in first:
            raise InputError(f"the header names this column twice (columns {first[name] + 1} "
                             f"and {i + 1}): which one is meant?", file=where, line=line,
                             field=name)
        first.setdefault(name, i)
    other = ";" if delimiter == "," else ","
    if len(names) == 1 and other in names[0]:
        raise InputError(f"the header has one column, {names[0]!r}: this file seems separated "
                         f"by '{other}'; ctxleak reads comma-separated .csv and tab-separated "
                         ".tsv files", file=where, line=line)
    return names


def _csv_row(values: list[str], header: list[str], where: str, line: int) -> dict[str, Any]:
    if len(values) != len(header) and any(v.strip() for v in values[len(header):]):
        raise InputError(f"more values than header columns ({len(values)} values, "
                         f"{len(header)} columns)", file=where, line=line)
    if len(values) < len(header):
        raise InputError(f"fewer values than header columns ({len(values)} values, "
                         f"{len(header)} columns): a value may be empty but not left out",
                         file=where, line=line)
    fields = {}
    for name, value in zip(header, values):
        if name:
            fields[name] = value
        elif value.strip():
            raise InputError(f"a value ({value[:20]!r}) under a column without a name in the "
                             "header", file=where, line=line)
    return fields


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
