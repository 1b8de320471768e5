"""``ctxleak models``: the named models and whether each is ready on this machine."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models(prepare: bool = typer.Option(False, "--prepare", help="Convert the installed "
                                            "named models into the safetensors cache now.")
               ) -> None:
        """List the named models (use them with --model NAME) and whether each is ready."""
        from ctxleak.cli.output import plain_output
        from ctxleak.engine.catalogue import model_status
        from ctxleak.engine.models import load_model
        from ctxleak.report.console import print_rows

        rows = model_status()
        if prepare:
            for row in rows:
                if row["ready"]:
                    load_model(row["name"], device="cpu")
            rows = model_status()
        print_rows([{k: row[k] for k in ("name", "status", "description")} for row in rows],
                   title="ctxleak models", justify="left", plain=plain_output())
        typer.echo("Any Hugging Face id, local model directory or .gguf file also works with "
                   "--model.")
