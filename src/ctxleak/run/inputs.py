"""Input data in any form the API accepts: a JSONL/CSV/Parquet file, a folder written
by ``datasets``' ``save_to_disk``, a list of dicts, a pandas DataFrame or a ``datasets.Dataset``.

Every form becomes ``(row number, fields)`` pairs, so the checks of :mod:`ctxleak.run.records`
(errors naming file, line and field) apply to all of them. pandas, pyarrow and datasets are
optional: only the form that needs one imports it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, InputError

#: What errors about in-memory rows call their "file" (rows are numbered from 1).
IN_MEMORY = "<data>"


def to_jsonable(value: Any) -> Any:
    """numpy / torch scalars and arrays, paths, tuples and NaN to plain JSON (NaN -> null)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def non_finite(value: Any, where: str = "") -> str | None:
    """The path (``a.b[2]``) of the first number in ``value`` that is NaN or infinite, or None
    when every number is finite (numpy and torch values included)."""
    if isinstance(value, dict):
        for k, v in value.items():
            found = non_finite(v, f"{where}.{k}" if where else str(k))
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = non_finite(v, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return non_finite(value.tolist(), where)
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(the value)"
    return None


def is_path(data: Any) -> bool:
    return isinstance(data, (str, Path))


def is_named(data: Any, name: str) -> bool:
    """Whether ``data`` is the word ``name`` (``"demo"``), never comparing a table to a string."""
    return isinstance(data, str) and data == name


def describe(data: Any) -> Any:
    """What ``config.json`` records for ``data``: a path as given; for rows in memory, their kind
    and count (the rows themselves are in ``samples.jsonl``)."""
    if is_path(data):
        return str(data)
    kind = type(data).__name__
    try:
        n = len(data)
    except TypeError:
        return f"<{kind}>"
    return f"<{kind} of {n} rows>"


def _plain(value: Any) -> Any:
    """numpy scalars (from pandas or Arrow) to Python values; NaN (a missing cell) to None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str, bytes)):
        with suppress(ValueError, TypeError):
            value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def memory_rows(data: Any) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a list of dicts, a pandas DataFrame or a ``datasets.Dataset``."""
    if hasattr(data, "to_dict") and hasattr(data, "columns") and hasattr(data, "iloc"):
        records = data.to_dict(orient="records")  # pandas DataFrame
    elif hasattr(data, "column_names") and hasattr(data, "to_list"):
        records = data.to_list()  # datasets.Dataset
    elif isinstance(data, (list, tuple)):
        records = list(data)
    else:
        raise ConfigError(f"data must be a file path, a list of dicts, a pandas DataFrame or a "
                          f"datasets.Dataset, not {type(data).__name__}", param="data")
    out = []
    for i, record in enumerate(records, start=1):
        if not isinstance(record, Mapping):
            raise InputError(f"each row must be a dict, got {type(record).__name__}",
                             file=IN_MEMORY, line=i)
        out.append((i, {str(k): _plain(v) for k, v in record.items()}))
    return out


def rows_sha256(data: Any) -> str:
    """SHA-256 of rows in memory (list of dicts, DataFrame, ``datasets.Dataset``): one JSON
    line per row, keys sorted, after the same conversions as :func:`memory_rows` (numpy
    scalars to Python, NaN to null; record objects by their ``to_dict()``), so equal rows give
    the same hash whatever their form and an edited cell changes it. What resume checks for
    data not read from a file."""
    if isinstance(data, (list, tuple)):  # record objects (PIIRecord) by their fields
        data = [r if isinstance(r, Mapping) or not hasattr(r, "to_dict") else r.to_dict()
                for r in data]
    digest = hashlib.sha256()
    for _, row in memory_rows(data):
        line = json.dumps(to_jsonable(row), sort_keys=True, ensure_ascii=False, default=repr)
        digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()


def parquet_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading Parquet needs pyarrow (pip install pyarrow)",
                         file=str(path)) from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - a damaged or non-Parquet file
        raise InputError(f"not a readable Parquet file ({exc})", file=str(path)) from None
    return [(i, {k: _plain(v) for k, v in row.items()})
            for i, row in enumerate(table.to_pylist(), start=1)]


def is_dataset_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_info.json").is_file()
                              or (path / "state.json").is_file()
                              or (path / "dataset_dict.json").is_file())


def dataset_folder_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a folder written by ``Dataset.save_to_disk`` (a ``DatasetDict`` needs its split:
    pass ``folder/train``)."""
    try:
        import datasets
    except ImportError:
        raise InputError("reading a datasets folder needs the 'datasets' package "
                         "(pip install datasets)", file=str(path)) from None
    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if p.is_dir())
        raise InputError(f"a DatasetDict folder: name one split, e.g. {path / splits[0]}"
                         if splits else "a DatasetDict folder without splits", file=str(path))
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - not a datasets folder after all
        raise InputError(f"not a readable datasets folder ({exc})", file=str(path)) from None
    return memory_rows(ds)
