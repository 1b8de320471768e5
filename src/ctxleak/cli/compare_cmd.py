"""``ctxleak compare RUN_DIR... [--output DIR]``: runs of one method paired per example and
side by side, through :func:`ctxleak.comparison.compare`; printed only, unless ``--output``."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare_cmd(
        runs: list[str] = typer.Argument(..., help="Run directories of one method over the "
                                         "same data: two or more (e.g. the same job on two "
                                         "models, or at λ = 1 and λ = 0.5), or one run with "
                                         "several settings."),
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="Folder for report.html, compare.json and "
                                             "the figures [default: none, the comparison is "
                                             "printed only]."),
    ) -> None:
        """Pair runs of one method per example (differences with a paired interval and the
        Wilcoxon signed-rank test, columns named by what differs between the runs) and lay
        their summaries side by side, each headline figure with one line per run."""
        from ctxleak.cli.output import plain_output
        from ctxleak.comparison import compare

        result = compare(runs, output=output)
        result.show(plain=plain_output())
        if result.path is not None:
            typer.echo(f"report: {result.path / 'report.html'}")
        else:
            typer.echo("not saved: pass --output DIR to write report.html, compare.json and "
                       "the figures")
