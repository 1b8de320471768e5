"""A run folder is checked as it is loaded (``load_result``, ``compare``) and resumed: files
tampered with or cut are errors naming the file, line and field, never a wrong Result."""

from __future__ import annotations

import json

import pytest
from helpers.run_folders import without_manifest

from ctxleak.comparison import compare
from ctxleak.errors import InputError
from ctxleak.results import ICLInfResult, load_result
from ctxleak.run.rundir import RunDir

SUMMARY = {"iclinf": {"1": {"full": {"n": 1, "iclinf_mean": 0.5, "iclinf_std": 0.0,
                                     "accuracy": 1.0, "mean_loss_by_position": [0.5]}}}}
RECORD = {"id": "n=1,q=0", "loss": [0.5]}


def _run(tmp_path, name="run"):
    """A saved one-sample ICLInf run folder (no model needed)."""
    return ICLInfResult(records=[dict(RECORD)], summary=json.loads(json.dumps(SUMMARY)),
                        config={"command": "icl"}).save(tmp_path / name)


def _edit_results(path, edit):
    body = json.loads((path / "results.json").read_text())
    edit(body)
    (path / "results.json").write_text(json.dumps(body))


def test_a_number_turned_string_names_its_field(tmp_path):
    path = _run(tmp_path)
    _edit_results(path, lambda b: b["summary"]["iclinf"]["1"]["full"].update(iclinf_mean="0.5"))
    message = r"results.json, field 'summary.iclinf.1.full.iclinf_mean': must be a number, " \
              r"got '0.5'"
    with pytest.raises(InputError, match=message):
        load_result(path)
    with pytest.raises(InputError, match=message):
        compare([path, _run(tmp_path, "other")])


def test_a_summary_of_another_shape(tmp_path):
    path = _run(tmp_path)
    _edit_results(path, lambda b: b["summary"]["iclinf"]["1"]["full"].pop("n"))
    with pytest.raises(InputError, match=r"results.json, field 'summary': the summary is not "
                                         r"as ctxleak writes it \(KeyError"):
        load_result(path)


def test_results_json_that_is_not_an_object(tmp_path):
    path = _run(tmp_path)
    (path / "results.json").write_text("[1, 2]\n")
    with pytest.raises(InputError, match=r"results.json: must be a JSON object, got list"):
        load_result(path)
    (path / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"results.json: not readable JSON \(.*nested"):
        load_result(path)


def test_a_duplicated_sample_row(tmp_path):
    path = _run(tmp_path)
    with open(path / "samples.jsonl", "a") as f:
        f.write(json.dumps(RECORD) + "\n")
    with pytest.raises(InputError, match=r"samples.jsonl:2, field 'id': two rows with id "
                                         r"'n=1,q=0' \(first on line 1\)"):
        load_result(path)


def test_no_rows_while_results_counts_one(tmp_path):
    path = _run(tmp_path)
    (path / "samples.jsonl").write_text("")
    with pytest.raises(InputError, match=r"samples.jsonl: has no row with id 'n=1,q=0'"):
        load_result(path)
    (path / "samples.jsonl").unlink()
    with pytest.raises(InputError, match=r"samples.jsonl: has no row with id"):
        load_result(path)


def test_a_foreign_row_is_left_out(tmp_path):
    path = _run(tmp_path)
    with open(path / "samples.jsonl", "a") as f:
        f.write(json.dumps({"id": "n=1,q=9", "loss": [9.0]}) + "\n")
    with pytest.warns(UserWarning, match="1 row"):
        back = load_result(path)
    assert back.records == [RECORD]


def test_a_folder_without_sample_ids_checks_the_count(tmp_path):
    path = without_manifest(_run(tmp_path))  # as written before sample_ids (and manifests)
    _edit_results(path, lambda b: b.pop("sample_ids"))
    assert load_result(path).records == [RECORD]
    with open(path / "samples.jsonl", "a") as f:
        f.write(json.dumps({"id": "n=1,q=9"}) + "\n")
    with pytest.raises(InputError, match=r"samples.jsonl: holds 2 sample rows, but results.json "
                                         r"summarised n_effective = 1"):
        load_result(path)
    _edit_results(path, lambda b: b.update(n_effective="1"))
    with pytest.raises(InputError, match=r"field 'n_effective': must be a count"):
        load_result(path)


def test_resume_refuses_a_bad_line_and_cuts_nothing(tmp_path):
    """A damaged line in the middle of samples.jsonl is an error naming it; the rows after it
    stay (before, resume dropped them and truncated the file there)."""
    run = RunDir(tmp_path / "r", {"a": 1})
    for key in ("x", "y", "z"):
        run.append_sample({"id": key})
    run.close()
    samples = tmp_path / "r" / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text(lines[0] + '{"id": "y"\n' + lines[2])
    before = samples.read_bytes()
    with pytest.raises(InputError, match=r"samples.jsonl:2: not valid JSON"):
        RunDir(tmp_path / "r", {"a": 1}, resume=True)
    assert samples.read_bytes() == before
