"""A run folder is safe to forward (issue 85): without ``--keep-texts`` no file of the run and
no page of its report holds the password, the API key or the door code of its documents; with
``--keep-texts`` they are kept; with ``--redact`` none anywhere and ctxleak's own words intact."""

from __future__ import annotations

import json
import re
import stat

import pytest
from conftest import run_cli

import ctxleak

PASSWORD = "Zq8#rT3vLx9!pW"
API_KEY = "sk_live_4f9a8b7c6d5e4f3a2b1c0d9e"
DOOR_CODE = "4821"
SECRETS = [PASSWORD, API_KEY, DOOR_CODE]
ROWS = [
    {"id": "runbook-db",
     "passages": [f"Runbook: the database password is {PASSWORD} and the API key is {API_KEY}.",
                  "Restart the service after rotating them and tell the on-call engineer."],
     "query": "How do I restart the service?"},
    {"id": "office-access",
     "passages": [f"Office access: the door code is {DOOR_CODE} for the north entrance.",
                  "Visitors sign in at reception and wear a badge."],
     "query": "Where do visitors sign in?"},
]
#: ctxleak's own words on an influence report, which the detectors take for names or ids
TEMPLATE = ["Wilcoxon", "Def.", "Verdict", "nats"]


def holding(folder, secrets=SECRETS):
    """{file name: the secrets it holds} over every file of the run folder."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            found = [s for s in secrets if re.search(rf"(?<![\w#]){re.escape(s)}(?!\w)", text)]
            if found:
                out[path.name] = found
    return out


def run(tiny_dir, tmp_path, capsys, *flags):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                                 "--max-new-tokens", "2", "--min-new-tokens", "1",
                                 "--output", str(out), *flags], capsys)
    assert code == 0, err
    return out, stdout


@pytest.mark.parametrize("flags", [(), ("--redact",)], ids=["default", "redact"])
def test_no_file_of_the_run_holds_a_secret_of_its_documents(tiny_dir, tmp_path, capsys, flags):
    out, stdout = run(tiny_dir, tmp_path, capsys, *flags)
    assert holding(out) == {}
    assert not [s for s in SECRETS if s in stdout]
    result = ctxleak.load_result(out)
    page = result.render()
    assert not [s for s in SECRETS if s in page]
    # the rows are still there, by id, with their other words
    assert [r["id"] for r in result.records] == ["runbook-db", "office-access"]
    assert "Restart the service" in (out / "samples.jsonl").read_text()
    report = (out / "report.html").read_text()
    assert "[REDACTED]" in report
    for word in TEMPLATE:  # the template is never masked, with --redact or not
        assert word in report, word


def test_keep_texts_keeps_them_in_a_private_folder(tiny_dir, tmp_path, capsys):
    out, _ = run(tiny_dir, tmp_path, capsys, "--keep-texts")
    assert set(holding(out)["samples.jsonl"]) == set(SECRETS)
    assert stat.S_IMODE((out / "samples.jsonl").stat().st_mode) == 0o600


def test_redact_keeps_ctxleaks_own_words():
    """The values found in a run's texts are masked, never the template's words around them
    (the detectors take "Def" and "≥" for names)."""
    from ctxleak.report.forwarding import Scrubber

    scrub = Scrubber(redact=True)
    row = scrub.record({"id": "a", "context": f"Employee: Marta Velikova, password {PASSWORD}"})
    assert PASSWORD not in row["context"] and "Velikova" not in row["context"]
    line = "Def. 3.2: Wilcoxon signed-rank, n ≥ 5, 12 ctx tokens; Marta Velikova copied"
    assert scrub.value(line) == ("Def. 3.2: Wilcoxon signed-rank, n ≥ 5, 12 ctx tokens; "
                                 "[REDACTED] copied")
    assert scrub.value({"id": "Marta Velikova"}) == {"id": "Marta Velikova"}  # ids kept
