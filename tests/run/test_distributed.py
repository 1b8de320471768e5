"""Data-parallel runs (SPEC §10): every model command launched by torchrun with 2 CPU processes
on gloo gives the same samples and results as a single-process run; resume across launches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.tiny_data import TEMPLATES, write_command_data

from ctxleak.run.distributed import World, barrier_timeout, current_world


def test_world_from_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    w = current_world()
    assert (w.rank, w.size, w.local_rank, w.is_main, w.distributed) == (2, 4, 0, False, True)
    assert [i for i in range(10) if w.owns(i)] == [2, 6]
    assert World().owns(5) and World().is_main


def _env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CTXLEAK_DEBUG="1")
    return env


def test_torchrun_two_processes_equal_single_process(tiny_dir, tmp_path):
    args = ["influence", "--model", tiny_dir, "--data", "demo", "--limit", "5",
            "--max-new-tokens", "4", "--min-new-tokens", "1", "--ngram", "16", "--seed", "3"]
    single = tmp_path / "single"
    multi = tmp_path / "multi"
    subprocess.run([sys.executable, "-m", "ctxleak", *args, "--output", str(single)],
                   check=True, env=_env(), capture_output=True, timeout=600)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "ctxleak", *args,
                           "--output", str(multi)], env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (multi / "samples.rank0.jsonl").is_file() and (multi / "samples.rank1.jsonl").is_file()

    def load(path):
        return [json.loads(x) for x in (path / "samples.jsonl").read_text().splitlines()]

    a, b = load(single), load(multi)
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b):
        assert x["response_ids"] == y["response_ids"]
    assert a == b  # batch-invariant: every float identical whatever the sharding
    ra = json.loads((single / "results.json").read_text())["summary"]["settings"][0]
    rb = json.loads((multi / "results.json").read_text())["summary"]["settings"][0]
    assert ra["influence"] == rb["influence"]
    # resume per shard: nothing left to do, files unchanged
    before = (multi / "samples.rank1.jsonl").read_text()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "ctxleak", *args, "--resume",
                           "--output", str(multi)], env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (multi / "samples.rank1.jsonl").read_text() == before


def _launch(argv, output, nproc=1, extra=()):
    """``python -m ctxleak ARGV`` in one process, or under torchrun with ``nproc`` processes."""
    launcher = [sys.executable] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
        str(nproc)]
    proc = subprocess.run([*launcher, "-m", "ctxleak", *argv, *extra, "--output", str(output)],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


TIMING = ("seconds", "time", "wall", "speedup")


def _differences(a, b, path=""):
    """Where two JSON values differ, numbers included: runs are batch-invariant (issue 13), so
    every float is the same whatever the sharding; keys about wall-clock time are skipped."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k} missing" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            if not any(word in k for word in TIMING) and not k.endswith("_s"):
                out += _differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_differences_sees_what_matters():
    assert _differences({"x": [1.0, "a"], "seconds": 3}, {"x": [1.0, "a"], "seconds": 9}) == []
    assert _differences({"x": [1.0]}, {"x": [1.0 + 1e-12]}) != []
    assert _differences({"x": [1.0]}, {"x": [1.1]}) == ["/x[0]: 1.0 != 1.1"]
    assert _differences({"x": 1}, {"y": 1}) != [] and _differences([1], [1, 2]) != []


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("dp-data"), 4)


COMMANDS = {
    "icl": lambda d: ["icl", "--data", str(d / "train.jsonl"), "--test-data",
                      str(d / "test.jsonl"), "--shots", "1,2", "--queries", "3",
                      "--calibration", "both", *TEMPLATES],
    "susceptibility": lambda d: ["susceptibility", "--data", str(d / "rel.json"),
                                 "--contexts", "6", "--limit", "5"],
    "probe": lambda d: ["probe", "--data", str(d / "records.jsonl"), "--pii", "phone,relation",
                        "--shots", "1", "--beam", "2", "--limit", "6"],
    "probe-white-box": lambda d: ["probe", "--data", str(d / "records.jsonl"), "--pii", "phone",
                                  "--mode", "white-box", "--epochs", "2", "--soft-tokens", "2"],
    "audit": lambda d: ["audit", "--data", "demo", "--subset-size", "3", "--sequences", "2",
                        "--max-new-tokens", "4", "--target-eps", "1,100", "--delta", "1e-5"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_model_command_runs_data_parallel(command, tiny_dir, data_files, tmp_path):
    argv = [*COMMANDS[command](data_files), "--model", tiny_dir, "--seed", "5"]
    _launch(argv, tmp_path / "single")
    multi = _launch(argv, tmp_path / "multi", nproc=2)
    rows = {}
    for name in ("single", "multi"):
        out = tmp_path / name
        rows[name] = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        rows[name + "/results"] = json.loads((out / "results.json").read_text())["summary"]
    assert len(rows["single"]) >= 4
    assert {p.name for p in (tmp_path / "multi").glob("samples.rank*.jsonl")} == \
        {"samples.rank0.jsonl", "samples.rank1.jsonl"}
    assert _differences(rows["single"], rows["multi"]) == []
    assert _differences(rows["single/results"], rows["multi/results"]) == []
    if command == "probe-white-box":  # trained once, by rank 0, and reused by rank 1
        assert multi.stderr.count("white-box phone: training") == 1
        assert "reusing the trained soft prompt" in multi.stderr


def test_one_process_resumes_a_data_parallel_run(tiny_dir, tmp_path):
    """Two processes stop early (--limit 3); one process resumes the rest: samples.jsonl then
    holds every example in order, as a single uninterrupted run would."""
    argv = ["influence", "--model", tiny_dir, "--data", "demo", "--max-new-tokens", "3",
            "--min-new-tokens", "1", "--ngram", "16", "--seed", "2"]
    _launch(argv, tmp_path / "single", extra=["--limit", "5"])
    _launch(argv, tmp_path / "run", nproc=2, extra=["--limit", "3"])
    _launch(argv, tmp_path / "run", extra=["--limit", "5", "--resume"])
    single, run = ([json.loads(x) for x in (tmp_path / d / "samples.jsonl").read_text().splitlines()]
                   for d in ("single", "run"))
    assert [r["id"] for r in run] == [r["id"] for r in single]
    assert _differences(single, run) == []
    # a later resume with a smaller --limit keeps the rows it no longer asks for
    _launch(argv, tmp_path / "run", extra=["--limit", "2", "--resume"])
    again = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [r["id"] for r in again] == [r["id"] for r in single]


def test_barrier_timeout_is_long_and_configurable(monkeypatch):
    monkeypatch.delenv("CTXLEAK_DIST_TIMEOUT_S", raising=False)
    assert barrier_timeout().total_seconds() >= 24 * 3600
    monkeypatch.setenv("CTXLEAK_DIST_TIMEOUT_S", "90")
    assert barrier_timeout().total_seconds() == 90


def test_accelerate_launch_equals_single_process(tiny_dir, data_files, tmp_path):
    """``accelerate launch --multi_gpu`` starts the processes through torch's launcher (on CPUs
    too, with gloo): same shards, same merged samples."""
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    if not os.path.exists(accelerate):
        pytest.skip("accelerate's launcher is not installed beside this Python")
    argv = [*COMMANDS["susceptibility"](data_files), "--model", tiny_dir]
    _launch(argv, tmp_path / "single")
    proc = subprocess.run([accelerate, "launch", "--multi_gpu", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend",
                           "no", "-m", "ctxleak", *argv, "--output", str(tmp_path / "multi")],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "multi" / "samples.rank1.jsonl").is_file()
    single, multi = ([json.loads(x) for x in (tmp_path / d / "samples.jsonl").read_text().splitlines()]
                     for d in ("single", "multi"))
    assert _differences(single, multi) == []
