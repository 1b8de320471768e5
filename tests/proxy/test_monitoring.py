"""The proxy's shipped monitoring (issue 83): the Grafana dashboard is what Grafana's own typed
builders make and its model loads, every series the dashboard and the alert rules read is one
the proxy exports, the rules pass ``promtool check rules`` and their unit tests (``promtool test
rules``: a document near its budget, the upstream failing, a caller spending fast or out of its
share, the ledger down), and ``export_monitoring`` never overwrites what it did not write."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxleak.cli.app import app
from ctxleak.errors import ConfigError
from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.monitoring import (
    ALERTS,
    DASHBOARD,
    MONITORING_FILES,
    export_monitoring,
    metric_names,
    monitoring_text,
)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent / "monitoring"


def _builder():
    pytest.importorskip("grafana_foundation_sdk")
    spec = importlib.util.spec_from_file_location("build_dashboard",
                                                  ROOT / "scripts/build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_dashboard_is_what_the_builder_makes():
    assert monitoring_text(DASHBOARD) == _builder().render()


def test_the_dashboard_loads_in_grafanas_model_and_round_trips():
    _builder()
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    shipped = json.loads(monitoring_text(DASHBOARD))
    model = Dashboard.from_json(shipped)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == shipped
    ids = [panel["id"] for panel in shipped["panels"]]
    assert len(ids) == len(set(ids)) == 14
    assert all(panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
               for panel in shipped["panels"] if panel["type"] != "row")


def _exported(text: str) -> set[str]:
    """The series names Prometheus stores from a /metrics text: each TYPE line's family, with
    its counter's ``_total`` and its histogram's ``_bucket``/``_sum``/``_count``."""
    names: set[str] = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        name, kind = kind_line
        names.add(name)
        names.update({"counter": [f"{name}_total"],
                      "histogram": [f"{name}_bucket", f"{name}_sum", f"{name}_count"]
                      }.get(kind, []))
    return names


def test_every_series_the_dashboard_and_rules_read_is_exported(tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    try:
        budgets = Budgets(default=2.0)
        ledger.reserve("r-1", ["hr-7"], 1.5, budgets)
        text = ProxyMetrics(ledger, lowest=5).text(operator=True).decode()
    finally:
        ledger.close()
    exported = _exported(text)
    for name in MONITORING_FILES:
        read = metric_names(monitoring_text(name))
        assert read and read <= exported, (name, read - exported)
    # the fraction the near-budget alert reads: 1.5 of a budget of 2
    assert 'ctxleak_proxy_budget_used_fraction{document="hr-7"} 0.75' in text
    # a renamed series would be caught: the check is not vacuous
    assert "ctxleak_proxy_budget_used" not in exported


def test_public_metrics_name_no_document(tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    try:
        ledger.reserve("r-1", ["hr-7"], 1.5, Budgets(default=2.0))
        text = ProxyMetrics(ledger, lowest=5).text(operator=False).decode()
    finally:
        ledger.close()
    assert "hr-7" not in text and "budget_used_fraction" not in text


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool (Debian's prometheus package) is not installed")
def test_the_alert_rules_pass_promtool_and_their_unit_tests(tmp_path):
    rules = tmp_path / ALERTS
    rules.write_text(monitoring_text(ALERTS), encoding="utf-8")
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS: 6 rules found" in check.stdout, check.stdout
    shutil.copy(HERE / "alerts_test.yml", tmp_path / "alerts_test.yml")
    unit = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    # and a rule that fires where it should not is caught: the unit tests are not vacuous
    rules.write_text(monitoring_text(ALERTS).replace(">= 0.9", ">= 0.4"), encoding="utf-8")
    broken = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0 and "CtxleakDocumentNearBudget" in broken.stdout + broken.stderr


def test_export_writes_keeps_and_never_overwrites(tmp_path):
    first = export_monitoring(tmp_path / "mon")
    assert [p.name for p in first.written] == list(MONITORING_FILES) and not first.unchanged
    assert (tmp_path / "mon" / ALERTS).read_text(encoding="utf-8") == monitoring_text(ALERTS)
    again = export_monitoring(tmp_path / "mon")
    assert not again.written and len(again.unchanged) == 2
    tuned = tmp_path / "mon" / ALERTS
    tuned.write_text("# my thresholds\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="exists with other contents"):
        export_monitoring(tmp_path / "mon")
    assert tuned.read_text(encoding="utf-8") == "# my thresholds\n"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        export_monitoring(tmp_path / "file")
    with pytest.raises(ConfigError, match="not one of"):
        monitoring_text("other.yml")


def test_cli_monitoring_writes_both_files(tmp_path):
    result = CliRunner().invoke(app, ["monitoring", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "grafana-dashboard.json  (written; Grafana" in result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(MONITORING_FILES)


def test_the_builder_check_mode_reports_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/build_dashboard.py"),
                             "--check"], capture_output=True, text=True, timeout=120)
    if "No module named 'grafana_foundation_sdk'" in result.stderr:
        pytest.skip("grafana-foundation-sdk is not installed")
    assert result.returncode == 0 and "up to date" in result.stdout
