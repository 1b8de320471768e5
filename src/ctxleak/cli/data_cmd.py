"""``ctxleak data``: the datasets each command takes by name (``--data NAME``)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("data")
    def data() -> None:
        """List the named datasets (use them with --data NAME): bundled demo sets with their
        sizes, and Hugging Face sets fetched on demand."""
        from ctxleak.cli.output import plain_output
        from ctxleak.methods.catalog import datasets
        from ctxleak.report.console import print_rows

        print_rows([{"--data": d.name, "command": d.command, "rows": d.rows,
                     "description": d.description} for d in datasets()],
                   title="ctxleak datasets", justify="left", plain=plain_output())
        typer.echo("Your own JSONL, CSV or Parquet file also works with --data (see each "
                   "command's --help for its fields).")
