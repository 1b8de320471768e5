"""The audit warns when its decoding is not the deployment's (issue 85): a deployed temperature
given, or a served model's greedy default, that the run did not measure at."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.deployment import decoding_note
from ctxleak.methods.influence.params import InfluenceParams


def test_the_note_says_both_temperatures_and_where_the_deployments_comes_from():
    note = decoding_note([0.5], 0.0, served=False)
    assert note is not None and note.startswith(
        "the audit decoded at T = 0.5, the deployment at T = 0 (greedy) (deployed_temperature)")
    assert "greedy default, assumed" in decoding_note([1.0], None, served=True)
    assert decoding_note([0.5, 1.0], 1.0, served=True) is None  # one setting decodes as it does
    assert decoding_note([0.8], None, served=False) is None  # in-process, nothing given


def test_a_negative_deployed_temperature_is_refused():
    with pytest.raises(ConfigError) as info:
        InfluenceParams(deployed_temperature=-1.0)
    assert info.value.param == "deployed_temperature"


def test_console_and_report_warn(tiny_dir, tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "context": "The office opens at nine.",
                                "query": "When does the office open?"}) + "\n")
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                                 "--max-new-tokens", "2", "--temperature", "0.5",
                                 "--deployed-temperature", "0", "--no-control",
                                 "--output", str(out)], capsys)
    assert code == 0, err
    assert "the audit decoded at T = 0.5, the deployment at T = 0 (greedy)" in stdout
    page = (out / "report.html").read_text()
    assert "decoding differs from the deployment" in page and "T = 0 (greedy)" in page
    assert ctxleak.load_result(out).config["deployed_temperature"] == 0.0
