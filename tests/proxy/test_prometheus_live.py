"""A real Prometheus (Debian's package) scraping a running proxy with the shipped alert rules:
the series the dashboard reads are stored under the names it queries, and a document at 95 % of
its budget fires ``CtxleakDocumentNearBudget`` naming that document (issue 83)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from typing import Any

import httpx
import pytest
from helpers.proxy_server import serving as proxy_serving

from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.monitoring import ALERTS, monitoring_text

# a real server process met once, beside headless Chromium's
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus (Debian's package) is not installed")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _until(probe: Any, seconds: float = 90.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not seen within {seconds} s")


def test_prometheus_scrapes_the_proxy_and_the_near_budget_alert_fires(lm, tmp_path):
    budgets = Budgets(default=1.0)
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    with proxy_serving(lm, ledger, budgets=budgets) as (url, _app):
        ledger.reserve("r-hr", ["hr-7"], 0.95, budgets)  # 95 % of its budget held
        ledger.reserve("r-faq", ["faq-1"], 0.2, budgets)
        answer = httpx.post(url + "/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 2}, timeout=60)
        assert answer.status_code == 400  # no upstream for a plain request: still counted
        (tmp_path / ALERTS).write_text(monitoring_text(ALERTS), encoding="utf-8")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{ALERTS}]\n"
            "scrape_configs:\n"
            f"  - job_name: rag\n    static_configs: [{{targets: ['{url[7:]}']}}]\n",
            encoding="utf-8")
        port = _free_port()
        server = subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api = f"http://127.0.0.1:{port}/api/v1"
        try:
            def query(expr: str) -> list[dict[str, Any]]:
                try:
                    reply = httpx.get(api + "/query", params={"query": expr}, timeout=5)
                except httpx.HTTPError:
                    return []
                return reply.json()["data"]["result"] if reply.status_code == 200 else []

            served = _until(lambda: query('ctxleak_proxy_requests_total{route="chat"}'))
            assert served[0]["metric"]["job"] == "rag" and float(served[0]["value"][1]) >= 1
            used = {row["metric"]["document"]: float(row["value"][1])
                    for row in _until(lambda: query("ctxleak_proxy_budget_used_fraction"))}
            assert used == pytest.approx({"hr-7": 0.95, "faq-1": 0.2})

            def firing() -> list[dict[str, Any]]:
                try:
                    alerts = httpx.get(api + "/alerts", timeout=5).json()["data"]["alerts"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return []
                return [a for a in alerts if a["state"] == "firing"]

            fired = _until(firing)
            assert {(a["labels"]["alertname"], a["labels"].get("document")) for a in fired} \
                == {("CtxleakDocumentNearBudget", "hr-7")}
        finally:
            server.terminate()
            server.wait(30)
    ledger.close()
