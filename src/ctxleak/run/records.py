"""Loading example files (JSONL or CSV) with errors that name the file, line and field (SPEC §9).

Everything is checked before any model is loaded.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ctxleak.errors import InputError


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
        elif not path.is_file():
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


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(line_number, parsed_value)`` for each non-blank line of a JSONL file; errors name the
    file (missing, not UTF-8) and the line (not valid JSON)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=str(path))
    try:
        with open(path, encoding="utf-8") as f:
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno})",
                                     file=str(path), line=number) from None
                yield number, value
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", file=str(path)) from None


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, value in read_jsonl(path):
        if not isinstance(value, dict):
            raise InputError("each line must be a JSON object", file=str(path), line=number)
        rows.append((number, value))
    return rows


def _read_csv(path: Path, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise InputError("no header row", file=str(path), line=1)
        for record in reader:
            if None in record:
                raise InputError("more values than header columns", file=str(path),
                                 line=reader.line_num)
            rows.append((reader.line_num, dict(record)))
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
