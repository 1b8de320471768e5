"""Numbers edited in a run folder are reported, never used: ``load_result``, ``compare`` and
``--resume`` check the folder's manifest (the SHA-256 of every file and sample line ctxleak
wrote) and each method's own checks (a response influence is the sum of its token influences,
a δ lies in (0, 1)), naming the file, the line and, where a check pins it down, the field."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
import signal

import pytest
from helpers.run_folders import without_manifest
from helpers.rundiff import untimed_samples

import ctxleak
from ctxleak.errors import EditedRunError
from ctxleak.results import AuditResult
from ctxleak.run.distributed import World
from ctxleak.run.manifest import digests_file
from ctxleak.run.rundir import RunDir

ROWS = [{"id": f"doc-{k}", "context": f"the capital of {c} is {p} .", "query": "what ?"}
        for k, (c, p) in enumerate([("france", "paris"), ("italy", "rome"),
                                    ("spain", "madrid")])]
KW = dict(max_new_tokens=4, min_new_tokens=2, seed=3, progress=False)


@pytest.fixture(scope="module")
def influence_run(tmp_path_factory, llama_lm):
    """A finished influence run (3 examples, with a control each), kept pristine: each test
    edits a copy."""
    out = tmp_path_factory.mktemp("manifest") / "run"
    ctxleak.influence(llama_lm, ROWS, output=str(out), **KW)
    return out


@pytest.fixture
def run(influence_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(influence_run, copy)
    return copy


def _rows(path):
    return [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]


def _write_rows(path, rows):
    (path / "samples.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                for r in rows))


def _edit_row(path, number, edit):
    rows = _rows(path)
    edit(rows[number - 1])
    _write_rows(path, rows)


def _resume(llama_lm, path):
    return ctxleak.influence(llama_lm, ROWS, output=str(path), resume=True, **KW)


def test_an_edited_influence_is_refused_by_load_compare_and_resume(run, influence_run,
                                                                   llama_lm):
    """The reported case: one row's influence changed, its token influences left as they were
    (they still sum to the old value)."""
    _edit_row(run, 2, lambda r: r.update(influence=187.28))
    where = r"samples.jsonl:2, field 'influence': 187.28 is not the sum of its token_influence"
    with pytest.raises(EditedRunError, match=where):
        ctxleak.load_result(run)
    with pytest.raises(EditedRunError, match=where):
        ctxleak.compare([run, influence_run])
    before = (run / "samples.jsonl").read_bytes()
    with pytest.raises(EditedRunError, match=where + r".*not resumed"):
        _resume(llama_lm, run)
    assert (run / "samples.jsonl").read_bytes() == before  # nothing recomputed from it
    # strict=False: warned with the same words, and loaded as it is
    with pytest.warns(UserWarning, match=where):
        loose = ctxleak.load_result(run, strict=False)
    assert loose.records[1]["influence"] == 187.28
    # the cross-check alone (no manifest, as an older ctxleak wrote the folder) finds it too
    without_manifest(run)
    with pytest.raises(EditedRunError, match=where):
        ctxleak.load_result(run)
    with pytest.raises(EditedRunError, match=where):
        _resume(llama_lm, run)


@pytest.mark.parametrize("field, value, message", [
    ("influence_above_control", 5.0, "is not influence − control_influence"),
    ("influence_per_token", 9.0, "is not influence / response_tokens"),
    ("logp_context", None, r"field 'token_influence\[0\]': .* is not \|logp_context − "),
    ("control_influence", -1.0, r"must be ≥ 0 \(an influence, nats\), got -1.0"),
])
def test_cross_checks_and_ranges_of_influence_rows(run, field, value, message):
    def edit(row):
        if value is None:  # a log-probability changed, the token influence not
            row[field][0] = round(row[field][0] - 0.5, 6)
        else:
            row[field] = value
    _edit_row(run, 1, edit)
    with pytest.raises(EditedRunError, match=message):
        ctxleak.load_result(without_manifest(run))


def test_an_edited_response_is_refused_by_its_line_digest(run, influence_run, llama_lm):
    """A word of a response changed: no check of the numbers can see it, the manifest does."""
    _edit_row(run, 3, lambda r: r.update(response="paris " + r["response"]))
    where = r"samples.jsonl:3: changed after ctxleak wrote it \(the line's SHA-256"
    for load in (lambda: ctxleak.load_result(run),
                 lambda: ctxleak.compare([run, influence_run]),
                 lambda: _resume(llama_lm, run)):
        with pytest.raises(EditedRunError, match=where):
            load()


def test_an_edited_summary_number_or_a_deleted_line(run, influence_run):
    body = json.loads((run / "results.json").read_text())
    body["summary"]["settings"][0]["influence"]["mean"] += 1.0
    (run / "results.json").write_text(json.dumps(body, indent=2))
    with pytest.raises(EditedRunError, match=r"results.json: changed after ctxleak wrote it"):
        ctxleak.load_result(run)
    shutil.copy(influence_run / "results.json", run / "results.json")
    rows = _rows(run)
    _write_rows(run, rows[:2])
    with pytest.raises(Exception, match=r"samples.jsonl: has no row with id 'doc-2"):
        ctxleak.load_result(run, strict=False)
    with pytest.raises(EditedRunError, match=r"samples.jsonl:3: ctxleak wrote 3 lines, 2 are "
                                             r"left: line 3 and after were deleted"):
        RunDir(run, json.loads((run / "config.json").read_text()), resume=True)


def test_a_removed_manifest_is_noticed(run):
    (run / ".ctxleak-manifest.json").unlink()
    with pytest.raises(EditedRunError, match=r"\.ctxleak-manifest\.json is missing although "
                                             r"\.samples\.jsonl\.sha256 is there"):
        ctxleak.load_result(run)


def test_a_folder_without_a_manifest_loads_unverified(run, influence_run):
    without_manifest(run)
    with pytest.warns(UserWarning, match=r"unverified: no \.ctxleak-manifest\.json"):
        back = ctxleak.load_result(run)
    assert back.records == ctxleak.load_result(influence_run).records


def test_a_kill_between_a_sample_line_and_its_digest_still_resumes(run, influence_run,
                                                                   llama_lm):
    """The last line written, its digest not: that example is measured again on resume, and
    the folder ends as a run that was never stopped."""
    digests = digests_file(run / "samples.jsonl")
    lines = digests.read_text().splitlines(keepends=True)
    digests.write_text("".join(lines[:-1]))
    for name in ("results.json", "report.html"):
        (run / name).unlink()
    done = _resume(llama_lm, run)
    assert len(done.records) == 3
    assert untimed_samples(run) == untimed_samples(influence_run)
    assert digests.read_text() == "".join(lines)
    assert ctxleak.load_result(run).records == done.records


def _append_then_die(folder: str) -> None:
    """A run process killed (SIGKILL) after its second sample line was written and fsynced,
    before that line's digest was."""
    from ctxleak.run import rundir

    run = RunDir(folder, {"a": 1})
    run.append_sample({"id": "x", "v": 1})
    rundir.append_digest = lambda fd, line: os.kill(os.getpid(), signal.SIGKILL)
    run.append_sample({"id": "y", "v": 2})


def test_a_process_killed_between_a_line_and_its_digest(tmp_path):
    folder = tmp_path / "r"
    child = multiprocessing.get_context("fork").Process(target=_append_then_die,
                                                        args=(str(folder),))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert len((folder / "samples.jsonl").read_text().splitlines()) == 2  # y, without digest
    run = RunDir(folder, {"a": 1}, resume=True)
    assert [r["id"] for r in run.samples] == ["x"]  # y is measured again
    run.append_sample({"id": "y", "v": 2})
    run.close()
    again = RunDir(folder, {"a": 1}, resume=True)
    assert [r["id"] for r in again.samples] == ["x", "y"]
    again.close()


AUDIT_ROW = {"id": "delta=1e-05/eps=1/seq=0", "setting": "delta=1e-05/eps=1", "delta": 1e-05,
             "target_eps": 1.0, "temperature": 38.1, "clip": 10.0, "subset_size": 3,
             "alpha": 18.0, "sequence": 0, "subset_lines": [20, 113, 49],
             "token_ids": [27, 47], "text": "italy one", "n_released": 2,
             "stopped_on_eos": False, "token_rdp": [6.1e-07, 6.2e-07],
             "token_argmax_prompt": [2, 2], "prompt_rdp": [2.1e-06, 1.9e-06, 2.6e-06],
             "rdp_sum": 1.23e-06, "text_tokens_cut": 0}
AUDIT_SETTING = {"delta": 1e-05, "target_eps": 1.0, "temperature": 38.1, "clip": 10.0,
                 "subset_size": 3, "alpha": 18.0, "eps_theoretical": 1.0,
                 "rdp_total": 1.23e-06, "eps_empirical": 0.9, "eps_empirical_zero_loss": 0.9,
                 "ratio": 0.9, "sequences": 1, "n_gen": 1, "complete": True, "tokens": 2,
                 "max_tokens_budget": 4, "token_rdp_mean": 6.15e-07, "token_rdp_max": 6.2e-07,
                 "paper_token_bound": 0.07, "sure_token_bound": 0.27,
                 "tokens_over_paper_bound": 0, "min_tokens": 2, "output_set": "vocabulary"}


def _audit(tmp_path):
    result = AuditResult(records=[dict(AUDIT_ROW)],
                         summary={"rows": [dict(AUDIT_SETTING)], "search": "temperature",
                                  "complete": True},
                         config={"command": "audit"}, path=tmp_path / "audit")
    return result, result.save(tmp_path / "audit")


def test_a_delta_above_one_is_refused(tmp_path):
    _, path = _audit(tmp_path)
    assert ctxleak.load_result(path).records == [AUDIT_ROW]
    without_manifest(path)
    body = json.loads((path / "results.json").read_text())
    body["summary"]["rows"][0]["delta"] = 1.5
    (path / "results.json").write_text(json.dumps(body))
    with pytest.raises(EditedRunError, match=r"results.json, field 'summary.rows\[0\].delta': "
                                             r"must be in \(0, 1\) \(δ of \(ε, δ\)-DP\), got 1.5"):
        ctxleak.load_result(path)
    body["summary"]["rows"][0]["delta"] = 1e-05
    (path / "results.json").write_text(json.dumps(body))
    _write_rows(path, [{**AUDIT_ROW, "delta": 1.5}])
    with pytest.raises(EditedRunError, match=r"samples.jsonl:1, field 'delta': must be in "
                                             r"\(0, 1\)"):
        ctxleak.load_result(path)
    _write_rows(path, [{**AUDIT_ROW, "token_rdp": [-6.1e-07, 6.2e-07]}])
    with pytest.raises(EditedRunError, match=r"field 'token_rdp\[0\]': must be ≥ 0"):
        ctxleak.load_result(path)


def test_nan_in_an_audit_summary_is_refused_on_load_and_shown_as_a_dash(tmp_path, capsys):
    result, path = _audit(tmp_path)
    without_manifest(path)  # the finite check alone: no manifest to notice the edit
    text = (path / "results.json").read_text().replace('"delta": 1e-05', '"delta": NaN')
    (path / "results.json").write_text(text)
    with pytest.raises(EditedRunError, match=r"results.json, field 'summary.rows\[0\].delta': "
                                             r"not a finite number"):
        ctxleak.load_result(path)
    result.summary["rows"][0].update(delta=math.nan, eps_empirical=math.nan)
    result.show(plain=True)  # a Result made in Python with NaN: no crash
    out = capsys.readouterr().out
    assert "δ = —" in out


def test_shards_of_a_data_parallel_run_and_their_merge_are_recorded(tmp_path):
    """Each process appends its own shard with its own line digests; rank 0's merged
    samples.jsonl gets digests of its own; one process resuming the folder checks them all."""
    folder = tmp_path / "dp"
    ranks = [RunDir(folder, {"a": 1}, world=World(rank, 2)) for rank in (0, 1)]
    for k in range(4):
        ranks[k % 2].append_sample({"id": f"e{k}", "v": k})
    for run in ranks:
        run.close()
    ranks[0].reload()
    ranks[0].merge_shards([f"e{k}" for k in range(4)])
    assert digests_file(folder / "samples.rank1.jsonl").is_file()
    one = RunDir(folder, {"a": 1}, resume=True)
    assert [r["id"] for r in one.samples] == ["e0", "e1", "e2", "e3"]
    one.close()
    text = (folder / "samples.rank1.jsonl").read_text().replace('"v": 3', '"v": 30')
    (folder / "samples.rank1.jsonl").write_text(text)
    with pytest.raises(EditedRunError, match=r"samples.rank1.jsonl:2: changed after ctxleak"):
        RunDir(folder, {"a": 1}, resume=True)
