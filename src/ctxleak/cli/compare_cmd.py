"""``ctxleak compare RUN_DIR... [--output DIR]``: runs of one method side by side, through
:func:`ctxleak.compare.compare`."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare_cmd(
        runs: list[str] = typer.Argument(..., help="Two or more run directories of one method "
                                         "(e.g. the same job on two models)."),
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="Folder for report.html, compare.json and "
                                             "the figures [default: runs/compare-TIME]."),
    ) -> None:
        """Lay runs of the same method side by side: the summary table with a column per run
        and each headline figure with one line per run (e.g. influence against model size)."""
        from ctxleak.cli.output import plain_output
        from ctxleak.comparison import compare, default_output

        result = compare(runs, output=output or default_output())
        result.show(plain=plain_output())
        if result.path is not None:
            typer.echo(f"report: {result.path / 'report.html'}")
