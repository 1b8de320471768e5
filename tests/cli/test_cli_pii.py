"""``ctxleak pii synth`` and ``ctxleak pii extract`` through the Typer app."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from ctxleak.cli.app import app, main
from ctxleak.methods.pii.records import load_records

runner = CliRunner()


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_pii_help():
    result = runner.invoke(app, ["pii", "--help"])
    assert result.exit_code == 0
    assert "extract" in result.output and "synth" in result.output


def test_synth_then_extract(tmp_path):
    out = tmp_path / "synth"
    result = runner.invoke(app, ["pii", "synth", "--n", "12", "--seed", "3", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "12 synthetic records" in result.output
    records_path, docs_path = out / "records.jsonl", out / "documents.jsonl"
    assert _mode(records_path) == 0o600 and _mode(docs_path) == 0o600
    records = load_records(records_path)
    assert len(records) == 12
    docs = [json.loads(line) for line in docs_path.read_text().splitlines()]
    assert len(docs) == sum(len(r.documents) for r in records)
    # no PII on the console
    assert records[0].email not in result.output and records[0].phone not in result.output

    again = tmp_path / "again"
    runner.invoke(app, ["pii", "synth", "--n", "12", "--seed", "3", "--output", str(again)])
    assert (again / "records.jsonl").read_bytes() == records_path.read_bytes()

    extracted = tmp_path / "pii.jsonl"
    result = runner.invoke(app, ["pii", "extract", "--input", str(docs_path),
                                 "--output", str(extracted)])
    assert result.exit_code == 0, result.output
    n = len(docs)
    assert f"email {n}, phone {n}, address {n}" in result.output
    assert "records written: 12" in result.output
    assert _mode(extracted) == 0o600
    got = {r.subject_id: r for r in load_records(extracted)}
    for r in records:
        assert (got[r.subject_id].email, got[r.subject_id].phone) == (r.email, r.phone)


def test_extract_txt_files_and_relax(tmp_path):
    src = tmp_path / "docs"
    src.mkdir()
    full = src / "jane.txt"
    full.write_text("Name: Jane Roe\nMail jane.roe+x@example.com or call (212) 555-0123.\n"
                    "Office: 100 Main Street, Boston, MA 02110\n", encoding="utf-8")
    partial = src / "max.txt"
    partial.write_text("Name: Max Doe\nPhone 415.555.0142 on 2024-05-01.\n", encoding="utf-8")
    anonymous = src / "anon.txt"
    anonymous.write_text("Call 212-555-0199.\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"

    result = runner.invoke(app, ["pii", "extract", "--input", str(full), str(partial),
                                 str(anonymous), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "email 1, phone 3, address 1" in result.output
    assert "documents kept: 1" in result.output and "records written: 1" in result.output
    (jane,) = load_records(out)
    assert (jane.subject_id, jane.name, jane.email) == ("jane", "Jane Roe",
                                                        "jane.roe+x@example.com")

    result = runner.invoke(app, ["pii", "extract", "--input", f"{full},{partial}",
                                 "--output", str(out), "--relax", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert [r.name for r in load_records(out)] == ["Jane Roe", "Max Doe"]

    result = runner.invoke(app, ["pii", "extract", "--input", str(src),
                                 "--output", str(tmp_path / "dir.jsonl"), "--relax"])
    assert result.exit_code == 0, result.output
    assert "read 3 documents from 3 file(s)" in result.output


def _run_main(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


def test_extract_malformed_jsonl_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"text": "hello", "name": "A B"}\n{"text": "oops\n', encoding="utf-8")
    code, err = _run_main(["pii", "extract", "--input", str(bad), "--output",
                           str(tmp_path / "o.jsonl")], capsys)
    assert code == 2
    assert f"{bad}:2" in err and "not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "o.jsonl").exists()


def test_extract_missing_text_field(tmp_path, capsys):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"name": "A B"}\n', encoding="utf-8")
    code, err = _run_main(["pii", "extract", "-i", str(bad), "-o", str(tmp_path / "o.jsonl")],
                          capsys)
    assert code == 2 and f"{bad}:1" in err and "field 'text'" in err


@pytest.mark.parametrize("args, needle", [
    (["--input", "missing.txt"], "not found"),
    (["--input", "x.csv"], "unsupported input"),
    ([], "no input"),
    (["--input", "a.txt", "--region", "XX"], "unknown phone region"),
])
def test_extract_user_errors(tmp_path, capsys, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("hi", encoding="utf-8")
    (tmp_path / "x.csv").write_text("a,b", encoding="utf-8")
    code, err = _run_main(["pii", "extract", *args, "--output", "o.jsonl"], capsys)
    assert code == 2 and needle in err


def test_synth_bad_n(tmp_path, capsys):
    code, err = _run_main(["pii", "synth", "--n", "0", "--output", str(tmp_path / "d")], capsys)
    assert code == 2 and "--n" in err


def test_extract_from_config_file(tmp_path, capsys):
    doc = tmp_path / "a.txt"
    doc.write_text("Name: Jane Roe\njane@example.com (212) 555-0123 "
                   "100 Main Street, Boston, MA 02110\n", encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"input: [{doc}]\noutput: {tmp_path / 'o.jsonl'}\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["pii", "extract", "--config", str(cfg)])
    assert info.value.code in (0, None)
    assert [r.name for r in load_records(tmp_path / "o.jsonl")] == ["Jane Roe"]
