"""Run folders and the operating system, extreme numbers, messages: folders that are not a run's
own are refused before anything in them changes, OS errors while claiming or writing a run are
one ``error:`` line (exit status 2) that loses nothing, the DP accounting's float inputs outside
their meaningful range are named with the range, SIGTERM acts as Ctrl-C, and ctxleak's warnings
are its own one-line ``warning:`` in the CLI."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError, CtxleakWarning, OutputError
from ctxleak.results import Result
from ctxleak.run.rundir import RunDir

BASE = ["influence", "--data", "demo", "--max-new-tokens", "3", "--min-new-tokens", "1"]


@pytest.fixture
def no_model(monkeypatch):
    """Any model load is a failure of the test: every check must come first."""
    import ctxleak.engine.models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(models, "load_model", refuse)


@pytest.fixture
def places(tmp_path):
    """Folders and files an output must not be written into, by name -> path."""
    notes = tmp_path / "notes"  # the user's own folder
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    finished = tmp_path / "finished"  # a finished run copied here (no lock file of ours)
    finished.mkdir()
    (finished / "config.json").write_text(json.dumps({"command": "influence"}) + "\n")
    (finished / "results.json").write_text(json.dumps({"summary": {}}) + "\n")
    (finished / "report.html").write_text("<p>the run's own report</p>\n")
    other = tmp_path / "other"
    RunDir(other, {"command": "influence", "data": "demo"}).release()
    (other / "results.json").write_text(json.dumps({"summary": {}}) + "\n")
    file = tmp_path / "file.txt"
    file.write_text("not a folder\n")
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"name": "Ann Lee", "text": "Ann Lee, ann@example.com, phone "
                                "202-555-0101, 1 Main St, Springfield, IL 62701"}) + "\n")
    for folder in (notes, finished, other):
        os.chmod(folder, 0o755)
    return {"notes": str(notes), "finished": str(finished), "other": str(other),
            "file": str(file), "docs": str(docs)}


def snapshot(paths):
    """Mode, listing and bytes of every given path (and of the files in a folder)."""
    out = {}
    for path in paths:
        out[path] = stat.S_IMODE(os.stat(path).st_mode)
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                with open(os.path.join(path, name), "rb") as f:
                    out[os.path.join(path, name)] = f.read()
        else:
            with open(path, "rb") as f:
                out[path + "#bytes"] = f.read()
    return out


# (argv, substrings the single error line must contain); {name} is a path from ``places``
CASES = [
    (BASE + ["--output", "{file}"], ["{file} is a file, not a folder", "--output"]),
    (BASE + ["--output", "{file}/run"], ["cannot create the run folder {file}/run",
                                         "a part of that path is a file", "--output"]),
    (BASE + ["--output", "{notes}"], ["{notes} is not empty", "no ctxleak run", "--output"]),
    (BASE + ["--resume", "--output", "{notes}"], ["{notes} is not empty", "no ctxleak run"]),
    (BASE + ["--output", "{finished}"], ["{finished} already holds a run", "--resume"]),
    (["icl", "--output", "{finished}"], ["{finished} already holds a run"]),
    (["compare", "{other}", "{finished}", "--output", "{finished}"],
     ["{finished} holds a ctxleak run", "its own report", "--output"]),
    (["compare", "{other}", "{finished}", "--output", "{other}"], ["{other} holds a ctxleak run"]),
    (["compare", "{other}", "{finished}", "--output", "{notes}"],
     ["{notes} is not empty", "no earlier comparison", "--output"]),
    (["compare", "{other}", "{finished}", "--output", "{file}"], ["{file} is a file"]),
    (["pii", "synth", "--n", "3", "--output", "{finished}"], ["{finished} holds a ctxleak run"]),
    (["pii", "extract", "--input", "{docs}", "--output", "{finished}/extracted.jsonl"],
     ["{finished} holds a ctxleak run"]),
    (["pii", "extract", "--input", "{docs}", "--output", "{notes}"], ["{notes} is a folder"]),
    (["dp", "calibrate", "--target-eps", "1e300"], ["--target-eps", "at most 709.78", "1e+300"]),
    (["dp", "calibrate", "--target-eps", "1,800"], ["--target-eps", "at most 709.78", "800"]),
    (["dp", "calibrate", "--temperature", "1e-300"], ["--temperature", "from 1e-100 to 1e+100"]),
    (["dp", "calibrate", "--clip", "1e300", "--search", "temperature"], ["--clip", "1e+100"]),
    (["dp", "calibrate", "--subset-size", "0"], ["--subset-size", "from 1 to 1e+100"]),
    (["dp", "epsilon", "--temperature", "1e-300"], ["--temperature", "from 1e-100 to 1e+100",
                                                    "got 1e-300"]),
    (["dp", "epsilon", "--clip", "-1"], ["--clip", "from 1e-100", "got -1"]),
    (["dp", "epsilon", "--clip", "1e-300"], ["--clip", "from 1e-100"]),
    (["dp", "epsilon", "--sequences", "10000000000"], ["--sequences", "from 1 to 1e+09"]),
    (["dp", "epsilon", "--max-new-tokens", "0"], ["--max-new-tokens", "from 1 to 1e+09"]),
    (["audit", "--target-eps", "1e300"], ["--target-eps", "at most 709.78"]),
    (["audit", "--temperature", "1e-300"], ["--temperature", "from 1e-100 to 1e+100"]),
]


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_refused_in_one_line_and_nothing_touched(argv, expected, places, no_model, tmp_path,
                                                 capsys):
    def fill(text):
        for name, path in places.items():
            text = text.replace("{" + name + "}", path)
        return text

    argv = [fill(a) for a in argv]
    if argv[0] in ("influence", "icl", "audit") and "--output" not in argv:
        argv += ["--output", str(tmp_path / "out")]
    before = snapshot(places.values())
    code, _, err = run_cli(argv, capsys)
    lines = [x for x in err.strip().splitlines() if not x.startswith("[ctxleak]")]  # progress
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert fill(text) in lines[0], lines[0]
    assert snapshot(places.values()) == before  # no chmod, no lock file, no report replaced


def test_compare_library_refuses_a_run_folder(places):
    with pytest.raises(ConfigError, match="holds a ctxleak run") as info:
        ctxleak.compare([places["other"], places["finished"]], output=places["finished"])
    assert info.value.param == "output"


def _read_only_mkdir(monkeypatch, root):
    """``mkdir`` under ``root`` fails as on a read-only mount (root ignores chmod, so a mode
    alone would not stop the test's own process)."""
    real = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(root)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)


def test_read_only_output_is_one_line(no_model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "ro" / "run"
    _read_only_mkdir(monkeypatch, tmp_path / "ro")
    code, _, err = run_cli(BASE + ["--output", str(out)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot create the run folder {out}: Read-only file "
                               "system; ")
    assert "choose a writable --output" in lines[0]


def test_read_only_output_in_python(tmp_path, monkeypatch):
    _read_only_mkdir(monkeypatch, tmp_path / "ro")
    with pytest.raises(OutputError) as info:
        RunDir(tmp_path / "ro" / "run", {"command": "influence"})
    assert isinstance(info.value, OSError) and info.value.errno == errno.EROFS
    assert info.value.param == "output"


def _full_disk_after(monkeypatch, lines_that_fit: int):
    """``os.write`` to a samples file writes half its bytes, then fails with ENOSPC, once
    ``lines_that_fit`` writes have gone through."""
    real, count = os.write, [0]

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("samples.jsonl"):
            count[0] += 1
            if count[0] > lines_that_fit:
                real(fd, bytes(data)[:len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="finds the file of a descriptor through /proc")


@NEEDS_PROC
def test_full_disk_keeps_whole_lines_and_resume_finishes(tiny_dir, tmp_path, capsys,
                                                         monkeypatch):
    out = tmp_path / "run"
    argv = BASE + ["--model", tiny_dir, "--limit", "3", "--output", str(out)]
    with monkeypatch.context() as patch:
        _full_disk_after(patch, 1)
        code, _, err = run_cli(argv, capsys)
    lines = [x for x in err.strip().splitlines() if x.startswith("error")]
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith(f"error: cannot write {out / 'samples.jsonl'}: No space left on "
                               "device; the disk (or quota) is full: free some space; 1 "
                               f"finished example(s) are kept in {out}: rerun the same command "
                               f"with --resume --output={out} to continue")
    kept = (out / "samples.jsonl").read_bytes()
    assert kept.endswith(b"\n") and len(kept.splitlines()) == 1  # the cut line is gone
    json.loads(kept)
    code, _, err = run_cli(argv + ["--resume"], capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and len({r["id"] for r in rows}) == 3
    assert json.loads((out / "results.json").read_text())["n_effective"] == 3


@NEEDS_PROC
def test_full_disk_on_results_json_leaves_no_half_file(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run", {"command": "influence"})
    run.append_sample({"id": "a"})
    real = os.fsync

    def fsync(fd):
        if "results.json" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OutputError, match="1 finished example") as info:
        run.write_results(Result(records=[{"id": "a"}], summary={}, n_effective=1))
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in run.path.iterdir() if "results" in p.name) == []
    run.release()


def test_sigterm_is_ctrl_c(tiny_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    real = RunDir.append_sample

    def append_then_terminated(self, record):
        real(self, record)
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` or a scheduler sends it

    def unhandled(signum, frame):  # what the test sees if the CLI does not take SIGTERM over
        raise RuntimeError("SIGTERM reached the default handler")

    monkeypatch.setattr(RunDir, "append_sample", append_then_terminated)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        code, _, err = run_cli(BASE + ["--model", tiny_dir, "--limit", "3", "--output",
                                       str(out)], capsys)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # put back after the command
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == (
        f"interrupted: 1 finished example(s) are saved in {out}; rerun the same command with "
        f"--resume --output {out} to continue")
    assert len((out / "samples.jsonl").read_text().splitlines()) == 1


def test_warnings_are_one_line_in_the_cli(tiny_dir, tmp_path, capsys):
    code, _, err = run_cli(BASE + ["--model", tiny_dir, "--limit", "1", "--ngram", "5000",
                                   "--output", str(tmp_path / "run")], capsys)
    assert code == 0, err
    warned = [x for x in err.splitlines() if "n-gram size" in x]
    assert len(warned) == 1, err
    assert warned[0].startswith("warning: example ")
    assert "n-gram size 5000 (--ngram) is larger than its context" in warned[0]
    assert "UserWarning" not in err and ".py:" not in err


def test_warnings_in_python_are_ctxleak_warnings_at_the_callers_line(llama_lm, tmp_path):
    with pytest.warns(CtxleakWarning, match=r"n-gram size 5000 \(ngram\)") as caught:
        ctxleak.influence(llama_lm, "demo", limit=1, max_new_tokens=3, min_new_tokens=1,
                          ngram=5000, output=str(tmp_path / "run"), progress=False)
    (warning,) = [w for w in caught if issubclass(w.category, CtxleakWarning)]
    assert warning.filename == __file__  # the caller's line, not a ctxleak source line
    assert warning.message.param == "ngram"


def test_compare_replaces_an_earlier_comparison_and_its_figures(tmp_path):
    from ctxleak.comparison import Comparison

    out = tmp_path / "cmp"
    Comparison("influence", ["a", "b"], [], [], {"compare_lambda.png": b"old"}, "<p>1</p>").save(out)
    Comparison("influence", ["a", "b"], [], [], {"compare_shots.png": b"new"}, "<p>2</p>").save(out)
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare_shots.png",
                                                     "report.html"]
    assert json.loads((out / "compare.json").read_text())["figures"] == ["compare_shots.png"]
    assert (out / "report.html").read_text() == "<p>2</p>"
