"""``ctxleak data``: the datasets each command takes by name (``--data NAME``)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("data")
    def data() -> None:
        """List the named datasets (use them with --data NAME): bundled demo sets with their
        sizes, and Hugging Face sets fetched on demand."""
        from rich.table import Table

        from ctxleak.cli.output import plain_output
        from ctxleak.methods.catalog import datasets
        from ctxleak.report.console import console as make_console

        table = Table(title="ctxleak datasets")
        for col in ("--data", "command", "rows", "description"):
            table.add_column(col)
        for d in datasets():
            table.add_row(d.name, d.command, d.rows, d.description)
        make_console(plain_output()).print(table)
        typer.echo("Your own JSONL, CSV or Parquet file also works with --data (see each "
                   "command's --help for its fields).")
