"""The black-box attacks' reports in headless Chromium, as every command's report
(tests/report/test_browser.py): an extraction run against a function that repeats the corpus
and a membership run against a RAG app the audit builds, with a script payload in a document:
no console errors or CSP violations, only the hashed script runs, the payload never does, the
membership page's ROC image loads, a header click sorts its table, and the page names the
attack family (the canary audit). Screenshots go to ``$CTXLEAK_SCREENSHOTS``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.cdp import Browser, find_chromium

import ctxleak
from ctxleak.api.attack_targets import RAGBuilder
from ctxleak.report.interactive import SCRIPT
from ctxleak.targets.base import FunctionTarget

pytest.importorskip("websocket", reason="websocket-client is not installed (pip install "
                    "websocket-client, or scripts/setup.sh --dev)")
CHROMIUM = find_chromium()
# headless Chromium is a real part met in the integration tier
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get "
                                 "install chromium, or scripts/setup.sh --dev)")]

PAYLOAD = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
DOCS = [{"id": f"d{k}", "text": text} for k, text in enumerate([
    f"Ana Lopez works in the Lisbon office, badge 4471, phone 555-0102. {PAYLOAD}",
    "The quarterly roadmap moves the billing service to the new cluster in October.",
    "Payroll runs on the last Friday of each month through the finance portal.",
    "The on-call rotation for the storage team changes every Monday at nine.",
    "Visitors must sign in at the front desk and wear a visible guest badge.",
    "The cafeteria on floor three serves breakfast from seven until ten."])]


class Echo:
    def answer(self, prompts):
        return [p.context for p in prompts]

    def describe(self):
        return f"echo {PAYLOAD}"

    def fingerprint(self):
        return "echo"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attack-runs")
    extract = ctxleak.attack_extract(
        FunctionTarget(lambda q: " ".join(d["text"] for d in DOCS), "repeat"), DOCS,
        output=str(root / "extract"), progress=False)
    membership = ctxleak.attack_membership(RAGBuilder(Echo(), top_k=2), DOCS, held_out=0.5,
                                           output=str(root / "membership"), progress=False)
    return {"extract": extract.path / "report.html",
            "membership": membership.path / "report.html"}


@pytest.mark.parametrize("name", ["extract", "membership"])
def test_attack_report_in_chromium(name, reports):
    browser = Browser(CHROMIUM)
    try:
        browser.open(reports[name])
        state = browser.evaluate("""(() => ({
          scripts: Array.from(document.scripts).map(s => s.textContent),
          images: Array.from(document.images).map(i => i.complete && i.naturalWidth > 0),
          pwned: typeof window.pwned, js: document.documentElement.classList.contains('js'),
          tables: document.querySelectorAll('table.interactive').length,
          text: document.body.innerText}))()""")
        shots = os.environ.get("CTXLEAK_SCREENSHOTS")
        if shots:
            browser.screenshot(Path(shots) / f"attack-{name}.png", full_page=True)
        assert browser.errors() == []
        assert state["scripts"] == [SCRIPT] and state["js"]
        assert state["pwned"] == "undefined"
        # one figure each, loaded: membership's ROC curve, extraction's coverage against queries
        assert state["images"] == [True]
        assert state["tables"] >= 2
        assert "ctxleak canary" in state["text"]  # the family, named on the page
        if name == "membership":
            assert "AUC" in state["text"] and "TPR @ FPR 10 %" in state["text"]
        else:
            assert "documents extracted verbatim" in state["text"]
        browser.click("table.interactive thead th:nth-child(1)")
        assert browser.errors() == []
    finally:
        browser.close()
