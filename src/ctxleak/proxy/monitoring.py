"""The privacy proxy's monitoring files, shipped with the package: a Grafana dashboard (JSON
model, built by ``scripts/build_dashboard.py`` with Grafana's own typed builders) and Prometheus
alert rules (a restricted document near its budget, budgets exhausted, a caller spending fast
or out of its share, the upstream model failing, the ledger down), over the series of
:mod:`ctxleak.proxy.metrics`.

:func:`export_monitoring` copies them into a folder for the operator's Grafana and Prometheus;
it never overwrites a file it did not write (one with other contents is refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctxleak.errors import ConfigError

#: The shipped files, by what they are for.
DASHBOARD = "grafana-dashboard.json"
ALERTS = "prometheus-alerts.yml"
MONITORING_FILES = (DASHBOARD, ALERTS)

_METRIC = re.compile(r"\bctxleak_proxy_[a-z_]+")


def monitoring_text(name: str) -> str:
    """The text of one shipped monitoring file (``name``: one of :data:`MONITORING_FILES`)."""
    if name not in MONITORING_FILES:
        raise ConfigError(f"monitoring file: {name!r} is not one of "
                          f"{', '.join(MONITORING_FILES)}", param="name")
    return (resources.files("ctxleak") / "data" / "monitoring" / name).read_text(
        encoding="utf-8")


def metric_names(text: str) -> set[str]:
    """The ctxleak series a dashboard or rule file reads, by name as Prometheus stores them
    (a counter ``x`` is stored as ``x_total``; a histogram ``x`` as ``x_bucket``, …)."""
    return set(_METRIC.findall(text))


@dataclass(frozen=True)
class MonitoringExport:
    """What :func:`export_monitoring` did: the folder, the files written and those that were
    already there with the same contents."""

    directory: Path
    written: tuple[Path, ...]
    unchanged: tuple[Path, ...]

    @property
    def files(self) -> tuple[Path, ...]:
        """Every monitoring file now in the folder."""
        return tuple(sorted(self.written + self.unchanged))

    def summary(self) -> str:
        """One line per file, saying where to load it."""
        use = {DASHBOARD: "Grafana: Dashboards > New > Import, upload this file",
               ALERTS: "Prometheus: list it under rule_files in prometheus.yml"}
        return "\n".join(f"{path}  ({'written' if path in self.written else 'unchanged'}; "
                         f"{use[path.name]})" for path in self.files)


def export_monitoring(directory: str | Path) -> MonitoringExport:
    """Copy the dashboard and the alert rules into ``directory`` (created if missing). A file
    of the same name with the same contents is left as it is; one with other contents is
    refused (:class:`~ctxleak.errors.ConfigError`), so an operator's tuned copy is never
    overwritten: export to another folder and compare."""
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: not a folder", param="directory")
    texts = {name: monitoring_text(name) for name in MONITORING_FILES}
    for name, text in texts.items():
        path = folder / name
        if path.exists() and path.read_bytes() != text.encode("utf-8"):
            raise ConfigError(f"{path}: exists with other contents (ctxleak does not overwrite "
                              f"a file it did not write); export to another folder",
                              param="directory")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    unchanged: list[Path] = []
    for name, text in texts.items():
        path = folder / name
        if path.exists():
            unchanged.append(path)
            continue
        partial = path.with_name(f".{name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
        written.append(path)
    return MonitoringExport(folder, tuple(written), tuple(unchanged))
