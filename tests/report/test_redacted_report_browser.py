"""``--redact`` on the bundled RAG audit example: the report, rendered in headless Chromium,
shows none of the example's secrets or personal data (every value its ground truth lists, as the
documents write them and as the answers repeat them), in any table, passage, n-gram or leak map.
The detectors are Presidio's and detect-secrets' (:mod:`ctxleak.sensitive`)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from helpers.cdp import Browser, find_chromium

import ctxleak

pytest.importorskip("websocket", reason="websocket-client is not installed (pip install "
                    "websocket-client, or scripts/setup.sh --dev)")
CHROMIUM = find_chromium()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get "
                                 "install chromium, or scripts/setup.sh --dev)")]
FOLDER = Path(str(resources.files("ctxleak") / "data" / "demo" / "rag_audit"))


def test_redacted_report_shows_no_secret_or_personal_value(tiny_dir, tmp_path) -> None:
    truth = json.loads((FOLDER / "truth.json").read_text())
    values = {v["value"] for v in truth["values"]}
    values |= {leak["in_answer"] for turn in truth["turns"].values() for leak in turn["leaks"]
               if leak["kind"] != "paraphrase"}
    result = ctxleak.influence(tiny_dir, "demo-rag-log", lambda_=1.0, temperature=1.0,
                               min_new_tokens=0, ngram=4, redact=True, progress=False,
                               output=tmp_path / "run")
    browser = Browser(CHROMIUM)
    try:
        browser.open(result.path / "report.html")
        text = browser.evaluate("document.body.innerText")
    finally:
        browser.close()
    assert "[REDACTED]" in text and "turn-08" in text
    left = sorted(v for v in values if v in text)
    assert not left, left
