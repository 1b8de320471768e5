"""``ctxleak.findings`` and ``ctxleak findings`` over run folders (issue 85): an extraction run
(real, against a function that leaks a runbook's password and key beside a public page it copies
whole), a membership run and an influence run's per-document ledger, joined by document id with
the operator's classes and the proxy ledger's budget state; the sheet saved (report, CSV, SARIF)
and read back; the CI gate's exit code; bad input in one line."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.mitigations.ledger import PUBLIC
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.budgets import Budgets
from ctxleak.results import DocumentTable, Findings, InfluenceResult
from ctxleak.targets.base import FunctionTarget

PASSWORD, KEY = "Hunter2-Vault-77", "sk_live_4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
RUNBOOK = ("Deploy runbook for the billing database. Connect as admin with password "
           f"{PASSWORD} and call the payments API with key {KEY}. Restart the workers after the "
           "migration finishes.")
HOLIDAYS = ("Public holidays: the office is closed on 25 December and 1 January. Opening hours "
            "are nine to five on weekdays, and the front desk answers general questions about "
            "visiting the campus and parking for guests and new starters alike.")
MEMO = "Quarterly planning notes: the storage team moves its on-call rotation to Mondays next term."
DOCS = [{"id": "runbook", "text": RUNBOOK}, {"id": "holidays", "text": HOLIDAYS},
        {"id": "memo", "text": MEMO}]
CLASSES = {"runbook": "restricted", "holidays": PUBLIC, "memo": "internal"}
LEAK = f"{HOLIDAYS} Also: the password is {PASSWORD} and the key is {KEY}."


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("findings")
    classes = root / "classes.jsonl"
    classes.write_text("".join(json.dumps({"id": k, "class": v}) + "\n"
                               for k, v in CLASSES.items()))
    ctxleak.attack_extract(FunctionTarget(lambda q: LEAK, "leaky"), DOCS,
                           output=str(root / "extract"), progress=False)
    ctxleak.attack_extract(FunctionTarget(lambda q: HOLIDAYS, "public only"), DOCS,
                           classes=str(classes), output=str(root / "public"), progress=False)
    return root, classes


def test_the_password_and_key_rank_above_the_public_page_copied_verbatim(runs, tmp_path):
    root, classes = runs
    sheet = ctxleak.findings([root / "extract"], classes=str(classes), output=tmp_path / "f")
    assert isinstance(sheet, Findings)
    top, last = sheet.records[0], sheet.records[-1]
    assert (top["document"], top["harm"], top["class"]) == ("runbook", "secret", "restricted")
    assert {v["type"] for v in top["carried_out"]} == {"password", "secret"}
    assert (last["document"], last["harm"]) == ("holidays", "public")
    assert last["verbatim"] == 3  # every answer copied the page whole: a use, ranked last
    assert sheet.summary["counts"]["secret"] == 1 and sheet.summary["documents"] == 3
    assert sheet.summary["headline"].startswith("3 documents: 1 carried a secret out")
    # saved: the report, the CSV and the SARIF, none holding a value; read back as Findings
    out = sheet.path
    for name in ("report.html", "findings.csv", "findings.sarif", "results.json",
                 "samples.jsonl"):
        text = (out / name).read_text()
        assert PASSWORD not in text and KEY not in text, name
        assert (out / name).stat().st_mode & 0o777 == 0o600
    lines = list(csv.DictReader((out / "findings.csv").open()))
    assert [r["document"] for r in lines] == ["runbook", "memo", "holidays"]
    sarif = json.loads((out / "findings.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["CTXLEAK001", "CTXLEAK007"]
    loaded = ctxleak.load_result(out)
    assert isinstance(loaded, Findings) and loaded.records[0]["document"] == "runbook"
    page = loaded.to_html()
    assert page.index("<table") < page.index("How the sheet is ranked")
    assert len(loaded.to_pandas()) == 3


def test_classes_an_attack_run_recorded_are_used(runs):
    root, _ = runs
    sheet = ctxleak.findings([root / "public"])  # the run took --classes: no flag needed
    assert {r["document"]: r["harm"] for r in sheet.records}["holidays"] == "public"
    assert sheet.failing("any") == []
    ledger = ctxleak.load_result(root / "public").ledger()
    assert isinstance(ledger, DocumentTable)
    assert [(r["document"], r["class"], r["harm"]) for r in ledger][-1] == (
        "holidays", PUBLIC, "public")
    assert list(ledger["document"]) == [r["document"] for r in ledger.records]


def test_an_influence_ledger_and_a_proxy_ledger_join_by_id(runs, tmp_path):
    root, classes = runs
    audit = InfluenceResult(records=[], config={"command": "influence"}, summary={"settings": [
        {"setting": "deployed", "documents": [
            {"document": "memo", "class": "internal", "leaked": 3, "leak_max": 0.75,
             "influence_sum": 2.0, "copied": 0, "top_queries": [{"query": "on-call days?"}],
             "pii_in_answers": []}]}]})
    db = tmp_path / "ledger.db"
    store = SQLiteLedger(db)
    store.reserve("r1", ["runbook"], 0.5, Budgets(default=2.0))
    store.settle("r1", 0.5)
    store.close()
    sheet = ctxleak.findings([root / "extract", audit], classes=str(classes),
                             ledger=f"sqlite:///{db}")
    rows = {r["document"]: r for r in sheet.records}
    assert rows["runbook"]["budget"]["spent"] == pytest.approx(0.5)
    assert rows["runbook"]["budget"]["remaining"] == pytest.approx(1.5)
    assert rows["memo"]["harm"] == "leaked" and rows["memo"]["question"] == "on-call days?"
    assert rows["memo"]["leak_max"] == 0.75 and rows["holidays"]["budget"] is None


def test_the_ci_gate_exits_1_at_or_above_its_level(runs, tmp_path, capsys):
    root, classes = runs
    code, stdout, stderr = run_cli(["--plain", "findings", str(root / "extract"), "--classes",
                                    str(classes), "--fail-on", "secret"], capsys)
    assert code == 1, stderr
    assert "runbook\trestricted\tsecret" in stdout
    assert "--fail-on secret: 1 document(s) at or above it (worst: runbook, secret)" in stderr
    code, _, stderr = run_cli(["findings", str(root / "public"), "--fail-on", "any"], capsys)
    assert code == 0, stderr
    code, _, stderr = run_cli(["findings", str(root / "public"), "--fail-on", "high"], capsys)
    assert code == 2 and "--fail-on must be one of secret, personal, verbatim, any" in stderr


def test_bad_inputs_in_one_line(runs, tmp_path):
    root, _ = runs
    with pytest.raises(ConfigError, match="no proxy ledger at"):
        ctxleak.findings([root / "extract"], ledger=str(tmp_path / "missing.db"))
    assert not (tmp_path / "missing.db").exists()
    bad = tmp_path / "classes.jsonl"
    bad.write_text('{"id": "runbook"}\n')
    with pytest.raises(InputError, match="class"):
        ctxleak.findings([root / "extract"], classes=str(bad))
    with pytest.raises(ConfigError, match="give at least one run folder"):
        ctxleak.findings([])
    other = Findings(records=[], summary={}, config={"command": "findings"})
    with pytest.raises(ConfigError, match="findings join runs of influence"):
        ctxleak.findings([other])
