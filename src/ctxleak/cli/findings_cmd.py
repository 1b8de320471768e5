"""``ctxleak findings RUN... [--classes FILE] [--ledger URL] [--output DIR] [--fail-on LEVEL]``:
one row per document across influence, extraction and membership runs of the same documents,
through :func:`ctxleak.api.findings.findings`; exit 1 when ``--fail-on`` finds a document at or
above its level (a CI gate)."""

from __future__ import annotations

from typing import Optional

import typer

FAIL_ON = ("secret", "personal", "verbatim", "any")


def register(app: typer.Typer) -> None:
    @app.command("findings")
    def findings_cmd(
        runs: list[str] = typer.Argument(..., help="Run folders of the same documents: "
                                         "ctxleak influence over retrieved documents, ctxleak "
                                         "attack extract, ctxleak attack membership (any of "
                                         "them, any number)."),
        classes: Optional[str] = typer.Option(
            None, "--classes", metavar="FILE", help="JSONL or CSV file of rows with id and "
            "class (the same file as ctxleak serve --classes), or demo-datastore: class public "
            "documents rank last [default: the classes an attack run recorded, else the "
            "ledger's]."),
        ledger: Optional[str] = typer.Option(
            None, "--ledger", metavar="URL", help="The privacy proxy's ledger "
            "(sqlite:///file.db, a path, or postgresql://...): each document's ε spent, budget "
            "and remaining on the sheet."),
        output: Optional[str] = typer.Option(
            None, "--output", "-o", help="Folder for report.html, findings.csv, findings.sarif "
            "and the run files [default: none, the sheet is printed only]."),
        fail_on: Optional[str] = typer.Option(
            None, "--fail-on", metavar="LEVEL", help="Exit 1 when a document's harm is at or "
            "above LEVEL: secret (a secret or credential carried out), personal (or personal "
            "data), verbatim (or a verbatim copy), any (any finding but public documents)."),
    ) -> None:
        """One sheet to act on: a row per document across the runs, the worst harm first.

        Each row: the document's class, its worst harm (secrets and credentials carried out
        first, then personal data, then verbatim copies of non-public text, public documents
        last), what was carried out and by which question, the membership evidence and the
        proxy's budget state. Values are named by type and SHA-256 prefix, never written out.

        Example:  ctxleak findings runs/audit runs/extract runs/membership --classes
        classes.jsonl --output runs/findings --fail-on personal
        """
        from ctxleak.api.findings import findings
        from ctxleak.cli.output import plain_output
        from ctxleak.errors import ConfigError

        if fail_on is not None and fail_on not in FAIL_ON:
            raise ConfigError(f"--fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}",
                              param="fail_on")
        result = findings(runs, classes=classes, ledger=ledger, output=output)
        result.show(plain=plain_output())
        if result.path is not None:
            typer.echo(f"report: {result.path / 'report.html'}  csv: "
                       f"{result.path / 'findings.csv'}  sarif: {result.path / 'findings.sarif'}")
        else:
            typer.echo("not saved: pass --output DIR to write report.html, findings.csv and "
                       "findings.sarif")
        if fail_on is not None:
            hits = result.failing(fail_on)
            if hits:
                typer.echo(f"--fail-on {fail_on}: {len(hits)} document(s) at or above it "
                           f"(worst: {hits[0]['document']}, {hits[0]['harm']})", err=True)
                raise typer.Exit(1)
