"""``ctxleak monitoring``: write the privacy proxy's Grafana dashboard and Prometheus alert
rules (shipped with the package) into a folder; :func:`ctxleak.proxy.monitoring.export_monitoring`
does the work."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add ``monitoring`` to ``app``."""

    @app.command("monitoring")
    def monitoring_cmd(
        directory: str = typer.Argument(..., help="Folder to write grafana-dashboard.json and "
                                        "prometheus-alerts.yml into (created if missing; a "
                                        "file there with other contents is never overwritten)."),
    ) -> None:
        """Write the Grafana dashboard and the Prometheus alert rules for `ctxleak serve`'s
        /metrics: a document near its privacy budget, budgets exhausted, a caller spending fast
        or out of its share, the upstream model failing, the ledger down."""
        from ctxleak.proxy.monitoring import export_monitoring

        typer.echo(export_monitoring(directory).summary())
