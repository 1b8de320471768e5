"""``ctxleak probe`` end to end on a tiny model saved to a directory; errors before loading."""

from __future__ import annotations

import json
import math
import stat

import pytest
from conftest import run_cli
from helpers.tiny_data import word_records

from ctxleak.methods.pii.records import save_records


@pytest.fixture(scope="module")
def records_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe-records") / "records.jsonl"
    save_records(word_records(8), path)
    return str(path)


def cli(argv, capsys):
    return run_cli(argv, capsys)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def _samples(out):
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_black_box_run_resume_and_refuse(tiny_dir, records_file, tmp_path, capsys):
    out = tmp_path / "bb"
    argv = ["probe", "--model", tiny_dir, "--data", records_file, "--pii", "phone,relation",
            "--shots", "1,2", "--beam", "2", "--output", str(out)]
    code, stdout, err = cli(argv + ["--limit", "6"], capsys)
    assert code == 0, err
    for name in ("config.json", "samples.jsonl", "results.json", "report.html"):
        assert (out / name).is_file(), name
        assert _mode(out / name) == 0o600, name
    pngs = sorted(p.name for p in out.glob("density_*.png"))
    assert len(pngs) == 4  # 2 shot settings x (phone twins, relation)
    rows = _samples(out)
    # 6 subjects x (5 phone twins + 5 father templates) x 2 shot settings
    assert len(rows) == 6 * 10 * 2
    assert len({r["key"] for r in rows}) == len(rows)
    assert all(r["id"] == r["subject"] for r in rows)  # the subject's own id, untouched
    first = rows[0]
    assert first["mode"] == "black-box" and first["shots_k"] in (1, 2)
    assert isinstance(first["generation"], str) and "target_ll" in first and "null_ll" in first
    results = json.loads((out / "results.json").read_text())
    assert results["n_effective"] == len(rows)
    assert {"ctxleak", "torch", "transformers", "model", "prompt_templates"} <= \
        set(results["provenance"])
    groups = results["summary"]["groups"]
    phone = [g for g in groups if g["pii_type"] == "phone" and g["shots_k"] == 1][0]
    assert phone["n_units"] == 6 and phone["n_prompts"] == 30
    # exact match (ProPILE §4): a subject counts if any of its templates reproduces the target
    phone_rows = [r for r in rows if r["pii_type"] == "phone" and r["shots_k"] == 1]
    hits: dict = {}
    for r in phone_rows:
        hits[r["subject"]] = hits.get(r["subject"], False) or bool(r["exact_match"])
    assert len(hits) == 6
    assert phone["exact_match_rate"] == pytest.approx(sum(hits.values()) / 6)
    assert phone["exact_match_rate_per_prompt"] == pytest.approx(
        sum(bool(r["exact_match"]) for r in phone_rows) / len(phone_rows))
    assert "location_code" in phone["string_metrics"]
    assert phone["wilcoxon"]["n"] == 6
    assert "PII probing" in stdout and "results:" in stdout
    html = (out / "report.html").read_text()
    assert html.lower().count("<script") == 1 and "Results per group" in html

    code, _, err = cli(argv + ["--limit", "7", "--resume"], capsys)
    assert code == 0, err
    rows2 = _samples(out)
    assert rows2[:len(rows)] == rows and len(rows2) == 7 * 10 * 2
    code, _, err = cli(argv + ["--limit", "7"], capsys)
    assert code == 2 and "--resume" in err
    code, _, err = cli(argv[:-2] + ["--beam", "1", "--output", str(out), "--resume"], capsys)
    assert code == 2 and "config differs in beam" in err


def test_in_context_and_white_box(tiny_dir, records_file, tmp_path, capsys):
    out = tmp_path / "modes"
    code, _, err = cli(["probe", "--model", tiny_dir, "--data", records_file, "--pii", "phone",
                        "--mode", "in-context,white-box", "--epochs", "2", "--soft-tokens", "2",
                        "--output", str(out)], capsys)
    assert code == 0, err
    rows = _samples(out)
    ctx = [r for r in rows if r["mode"] == "in-context"]
    assert len(ctx) == 8 * 5
    for r in ctx:  # whole-context influence (paper 000, Def. 3.1-3.2) and the context share
        assert r["influence"] == pytest.approx(math.fsum(r["token_influence"]))
        assert len(r["token_influence"]) == r["target_tokens"]
        assert r["log_ratio"] == pytest.approx(r["target_ll"] - r["no_context_ll"])
        # Σ_r |a_r − b_r| ≥ |Σ_r a_r − Σ_r b_r|
        assert r["influence"] >= abs(r["log_ratio"]) - 1e-9
        assert r["context_share"] == pytest.approx(
            max(0.0, 1 - math.exp(r["no_context_ll"] - r["target_ll"])))
    assert any(r["influence"] > 1e-6 for r in ctx)
    wb = [r for r in rows if r["mode"] == "white-box"]
    assert {r["variant"] for r in wb} == {"soft-prompt", "beam"}
    assert all(r["group"] == "held-out" and r["template"] == "twins-1" for r in wb)
    held = {r["subject"] for r in wb}
    assert len(held) == 4  # train fraction 0.5 of 8 subjects
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["white_box"]["phone"]["n_train_subjects"] == 4
    assert (out / "soft_prompt_phone.npy").is_file()
    assert (out / "white_box_training.png").is_file()
    ic = [g for g in summary["groups"] if g["mode"] == "in-context"][0]["in_context"]
    assert ic["mean_influence"] == pytest.approx(
        sum(r["influence"] for r in ctx) / len(ctx))


def test_canary_and_redact(tiny_dir, records_file, tmp_path, capsys):
    out = tmp_path / "canary"
    code, stdout, err = cli(["probe", "--model", tiny_dir, "--data", records_file, "--pii",
                             "phone", "--canary", "3", "--canary-epochs", "2",
                             "--canary-layers", "0", "--redact", "--output", str(out)], capsys)
    assert code == 0, err
    rows = _samples(out)
    assert {r["mode"] for r in rows} == {"canary"}
    assert {r["group"] for r in rows} == {"inserted", "held-out", "inserted-vs-inserted"}
    summary = json.loads((out / "results.json").read_text())["summary"]
    (verdict,) = summary["canary"]["verdict"]
    assert verdict["pii_type"] == "phone" and "detected" in verdict
    assert set(verdict) >= {"inserted_pvalue", "held_out_pvalue", "association_pvalue"}
    ft = summary["canary"]["finetune"]
    assert len(ft["losses"]) == 2 and len(ft["inserted"]) == len(ft["held_out"]) == 3
    assert "canary phone" in stdout
    html = (out / "report.html").read_text()
    for r in word_records(8):
        assert r.name not in html and r.phone not in html and r.name not in stdout
    assert "[REDACTED]" in html
    assert any(r.phone in json.dumps(s) for s in rows for r in word_records(8))
    # resuming a finished canary run reuses the stored fine-tuning record, no training
    code, _, err = cli(["probe", "--model", tiny_dir, "--data", records_file, "--pii", "phone",
                        "--canary", "3", "--canary-epochs", "2", "--canary-layers", "0",
                        "--output", str(out), "--resume"], capsys)
    assert code == 0, err
    assert "fine-tuning a copy" not in err and _samples(out) == rows
    again = json.loads((out / "results.json").read_text())["summary"]["canary"]
    assert again["verdict"] == summary["canary"]["verdict"]


@pytest.mark.parametrize("args, message", [
    (["--pii", "phone,ssn"], "unknown PII type 'ssn'"),
    (["--shots", "0"], "--shots must be integers from 1 to 5"),
    (["--shots", "9"], "--shots must be integers from 1 to 5"),
    (["--shots", "5", "--limit", "3"], "asked for 4 shots but only 2"),
    (["--mode", "grey-box"], "unknown mode 'grey-box'"),
    (["--beam", "0"], "--beam must be >= 1"),
    (["--structure", "pairs"], "--structure must be one of"),
    (["--train-fraction", "1.5"], "--train-fraction"),
    (["--canary", "5"], "needs 10 subjects with documents"),
])
def test_bad_flags_fail_before_loading(records_file, tmp_path, capsys, args, message):
    code, _, err = cli(["probe", "--model", str(tmp_path / "no-such-model"), "--data",
                        records_file, "--output", str(tmp_path / "x"), *args], capsys)
    assert code == 2 and message in err, err
    assert "Traceback" not in err


def test_malformed_records_name_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "paris france", "phone": "one two"}\n{"name": "rome", \n')
    code, _, err = cli(["probe", "--model", str(tmp_path / "m"), "--data", str(bad)], capsys)
    assert code == 2 and f"{bad}:2" in err and "not valid JSON" in err
    bad.write_text('{"name": "paris france"}\n{"phone": "one two"}\n')
    code, _, err = cli(["probe", "--model", str(tmp_path / "m"), "--data", str(bad)], capsys)
    assert code == 2 and f"{bad}:2" in err and "field 'name'" in err
    code, _, err = cli(["probe", "--data", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "file not found" in err


@pytest.mark.integration
def test_default_model_tiny_run(tmp_path, capsys):
    out = tmp_path / "default"
    code, stdout, err = cli(["probe", "--data", "demo", "--subjects", "3", "--pii", "phone",
                             "--device", "cpu", "--output", str(out)], capsys)
    assert code == 0, err
    rows = _samples(out)
    assert len(rows) == 3 * 5
    assert all(r["target_tokens"] > 3 and r["target_ll"] < 0 for r in rows)
    results = json.loads((out / "results.json").read_text())
    (group,) = results["summary"]["groups"]
    assert group["n_units"] == 3 and group["wilcoxon"]["n"] == 3
    assert "SmolLM2" in json.dumps(results["provenance"]["model"]) or \
        results["provenance"]["model"]["name"] == "default"
