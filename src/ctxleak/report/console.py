"""Console tables (rich): what the CLI and ``Result.show()`` print."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def format_cell(value: Any) -> str:
    """A value for a printed table: 4 significant digits, a dash for missing."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_rows(rows: Sequence[Mapping[str, Any]], *, title: str = "",
               justify: str = "right") -> None:
    """A table of dicts (columns: the first row's keys) on stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None)
    if not rows:
        Console().print(f"{title}: no rows")
        return
    for col in rows[0]:
        table.add_column(str(col), justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*[format_cell(v) for v in row.values()])
    Console().print(table)
