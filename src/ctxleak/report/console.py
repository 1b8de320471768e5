"""Console tables (rich): what the CLI and ``Result.show()`` print.

On a terminal, tables fit its width. When stdout is not a terminal (a pipe, a file, CI, a
Jupyter cell) rich would assume 80 columns and cut headers ("influ…"); :func:`console` then
gives a console wide enough that every table prints at its full width, without box drawing,
colours or any other ANSI code (so ``ctxleak models | cat`` and a notebook's ``text/plain`` are
plain text). With ``plain=True`` (``ctxleak --plain``) tables print as tab-separated values
instead: a header line, one line per row.

Under ``--redact`` everything printed (strings, tables' titles, headers and cells) goes through
the active :class:`~ctxleak.report.redaction.Redactor` (:func:`ctxleak.report.redaction.redacting`,
set by a run's view while it prints), the one the HTML report uses; only :func:`print_closing`'s
line (the run folder's path, not data) is printed as it is.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.report.redaction import Redactor, active

WIDE = 100_000  # columns when stdout is not a terminal: no table is ever cut


def format_cell(value: Any) -> str:
    """A value for a printed table: 4 significant digits, a dash for missing."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _tsv_field(text: Any) -> str:
    return " ".join(str(text).replace("\t", " ").splitlines())


def table_tsv(table: Any) -> str:
    """A rich Table as TSV: the headers, then one line per row (tabs and newlines in cells
    become spaces; the title, if any, first as a ``# title`` line)."""
    cols = list(table.columns)
    lines = [f"# {_tsv_field(table.title)}"] if table.title else []
    lines.append("\t".join(_tsv_field(c.header) for c in cols))
    cells = [list(c.cells) for c in cols]
    for i in range(table.row_count):
        lines.append("\t".join(_tsv_field(col[i]) if i < len(col) else "" for col in cells))
    return "\n".join(lines)


_COLUMN_OPTIONS = ("footer", "header_style", "highlight", "footer_style", "style", "justify",
                   "vertical", "overflow", "width", "min_width", "max_width", "ratio", "no_wrap")


def redacted(obj: Any, redactor: Redactor) -> Any:
    """What the console prints of ``obj`` under ``redactor``: a string or rich Text masked, a
    rich Table copied with its title, headers and cells masked, any other value that is not a
    rich renderable (a number, a dict, a list) as its masked string (other renderables as they
    are)."""
    from rich.protocol import is_renderable
    from rich.table import Table
    from rich.text import Text

    if not redactor.on:
        return obj
    if isinstance(obj, str):
        return redactor.text(obj)
    if isinstance(obj, Text):
        return Text(redactor.text(obj.plain), style=obj.style)
    if not is_renderable(obj):
        return redactor.text(obj)
    if not isinstance(obj, Table):
        return obj
    out = copy.copy(obj)
    out.columns, out.rows = [], []
    out.title = redacted(obj.title, redactor) if obj.title is not None else None
    cells = [list(c.cells) for c in obj.columns]
    for col in obj.columns:
        out.add_column(redacted(col.header, redactor),
                       **{k: getattr(col, k) for k in _COLUMN_OPTIONS})
    for i, row in enumerate(obj.rows):
        out.add_row(*[redacted(col[i], redactor) if i < len(col) else "" for col in cells],
                    style=row.style, end_section=row.end_section)
    return out


class _Console:
    """A rich Console that prints tables as TSV in plain mode (other output unchanged), every
    object through the active Redactor unless ``redact=False``."""

    def __init__(self, plain: bool = False, redact: bool = True, **kwargs: Any) -> None:
        from rich.console import Console

        self.plain = plain
        self.redact = redact
        self.terminal = sys.stdout.isatty()
        if not self.terminal:
            kwargs.setdefault("width", WIDE)
            kwargs.update(color_system=None, force_terminal=False, force_jupyter=False)
        self._console = Console(**kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from rich.table import Table

        if self.redact:
            objects = tuple(redacted(obj, active()) for obj in objects)
        if self.plain and len(objects) == 1 and isinstance(objects[0], Table):
            sys.stdout.write(table_tsv(objects[0]) + "\n")
            sys.stdout.flush()
            return
        if not self.terminal and any(isinstance(t, Table) for t in objects):
            titles = []
            for table in objects:  # columns apart by spaces, no box drawing
                if isinstance(table, Table):
                    table.box, table.show_edge, table.pad_edge = None, False, False
                    if table.title:  # on its own line: a title as wide as the table wraps
                        titles.append(str(table.title))
                        table.title = None
            with self._console.capture() as captured:
                self._console.print(*objects, **kwargs)
            lines = titles + [line.rstrip() for line in captured.get().splitlines()]
            sys.stdout.write("".join(line.strip() and line + "\n" or "\n" for line in lines))
            sys.stdout.flush()
            return
        self._console.print(*objects, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console, name)


def console(plain: bool = False, redact: bool = True, **kwargs: Any) -> Any:
    """The console every command prints with (full width off a terminal; tables as TSV when
    ``plain``, ``ctxleak --plain``; what it prints masked by the active Redactor unless
    ``redact=False``)."""
    return _Console(plain, redact, **kwargs)


def print_rows(rows: Sequence[Mapping[str, Any]], *, title: str = "",
               justify: str = "right", plain: bool = False) -> None:
    """A table of dicts (columns: the first row's keys) on stdout."""
    from rich.table import Table

    table = Table(title=title or None)
    if not rows:
        console(plain).print(f"{title}: no rows")
        return
    for col in rows[0]:
        table.add_column(str(col), justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*[format_cell(v) for v in row.values()])
    console(plain).print(table)


def print_verdict(verdict: Mapping[str, Any] | None, *, plain: bool = False) -> None:
    """The run's verdict and its rule, first in a console summary (nothing when the run has
    none)."""
    if not verdict:
        return
    out = console(plain)
    out.print(f"Verdict: {verdict.get('text', '')}", markup=False, highlight=False,
              soft_wrap=True)
    if verdict.get("rule"):
        out.print(f"Rule: {verdict['rule']}", markup=False, highlight=False, soft_wrap=True)


def closing_line(path: Any) -> str:
    """The last line every command prints: where the results and the report are, and what to
    open next (the same words for every method)."""
    if path is None:
        return "not saved (no run folder); result.save(DIR) writes results.json and report.html"
    return (f"results: {path}/results.json   report: {path}/report.html   "
            f"next: open the report in a browser, or ctxleak.load_result(\"{path}\") in Python")


def print_closing(path: Any, plain: bool = False) -> None:
    """Print :func:`closing_line` (no markup: paths may hold brackets; never redacted: the run
    folder's path is the user's own, not the run's data)."""
    console(plain, redact=False).print(closing_line(path), markup=False, highlight=False, soft_wrap=True)
