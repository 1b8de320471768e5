"""Data-parallel runs: every model command launched by torchrun with 2 CPU processes on gloo
gives the same samples and results as a single-process run; resume across launches.

One torchrun launch of two workers runs every command (tests/helpers/run_many.py), and one
``accelerate launch`` runs one; the single-process runs they are compared with run in this
process. Both launches are subprocesses that import torch: the ``integration`` tier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
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


HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CTXLEAK_DEBUG="1")
    return env


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


INFLUENCE = ["influence", "--data", "demo", "--limit", "5", "--max-new-tokens", "4",
             "--min-new-tokens", "1", "--ngram", "16", "--seed", "3"]
#: stopped early by --limit 3 under torchrun, then resumed by one process; the number of
#: controls given, as the default follows the first run's number of examples (a resume keeps it)
RESUMED = ["influence", "--data", "demo", "--max-new-tokens", "3", "--min-new-tokens", "1",
           "--ngram", "16", "--seed", "2", "--controls", "2"]


@pytest.fixture
def one_thread():
    """``--threads 1`` in this process, as OMP_NUM_THREADS=1 in the launched workers (the
    same kernels: every float comparable); torch's thread count restored afterwards."""
    import torch

    before = torch.get_num_threads()
    yield ["--threads", "1"]
    torch.set_num_threads(before)


def _rows(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())["summary"]


@pytest.fixture(scope="module")
def launched(tiny_dir, data_files, tmp_path_factory):
    """One torchrun launch, two workers, every step of the plan: each model command, the
    influence run and its resume, and the influence run stopped early for a later resume."""
    root = tmp_path_factory.mktemp("torchrun")
    steps = [{"argv": [*COMMANDS[name](data_files), "--model", tiny_dir, "--seed", "5",
                       "--output", str(root / name)]} for name in sorted(COMMANDS)]
    influence = root / "influence"
    steps += [
        {"argv": [*INFLUENCE, "--model", tiny_dir, "--output", str(influence)],
         "snapshot": [str(influence / "samples.rank1.jsonl")]},
        {"argv": [*INFLUENCE, "--model", tiny_dir, "--resume", "--output", str(influence)]},
        {"argv": [*RESUMED, "--model", tiny_dir, "--limit", "3", "--output",
                  str(root / "resumed")]},
    ]
    plan = root / "plan.json"
    plan.write_text(json.dumps(steps))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(HELPERS / "run_many.py"), str(plan)],
                          env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return root, proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_model_command_runs_data_parallel(command, launched, tiny_dir, data_files,
                                                tmp_path, capsys, one_thread):
    root, stderr = launched
    single = tmp_path / "single"
    code, _, err = run_cli([*COMMANDS[command](data_files), "--model", tiny_dir, "--seed", "5",
                            *one_thread, "--output", str(single)], capsys)
    assert code == 0, err
    multi = root / command
    assert len(_rows(single)) >= 4
    assert {p.name for p in multi.glob("samples.rank*.jsonl")} == \
        {"samples.rank0.jsonl", "samples.rank1.jsonl"}
    assert _differences(_rows(single), _rows(multi)) == []
    assert _differences(_summary(single), _summary(multi)) == []
    if command == "probe-white-box":  # trained once, by rank 0, and reused by rank 1
        assert stderr.count("white-box phone: training") == 1
        assert "reusing the trained soft prompt" in stderr


@pytest.mark.integration
def test_torchrun_two_processes_equal_single_process(launched, tiny_dir, tmp_path, capsys,
                                                     one_thread):
    root, _ = launched
    single, multi = tmp_path / "single", root / "influence"
    code, _, err = run_cli([*INFLUENCE, "--model", tiny_dir, *one_thread, "--output",
                            str(single)], capsys)
    assert code == 0, err
    assert (multi / "samples.rank0.jsonl").is_file() and (multi / "samples.rank1.jsonl").is_file()
    a, b = _rows(single), _rows(multi)
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b):
        assert x["response_ids"] == y["response_ids"]
    assert a == b  # batch-invariant: every float identical whatever the sharding
    assert _summary(single)["settings"][0]["influence"] == \
        _summary(multi)["settings"][0]["influence"]
    # the second launch with --resume found nothing left to do: the shard is unchanged
    before = multi / "samples.rank1.jsonl.before"
    assert (multi / "samples.rank1.jsonl").read_text() == before.read_text()


@pytest.mark.integration
def test_one_process_resumes_a_data_parallel_run(launched, tiny_dir, tmp_path, capsys,
                                                 one_thread):
    """Two processes stop early (--limit 3); one process resumes the rest: samples.jsonl then
    holds every example in order, as a single uninterrupted run would."""
    root, _ = launched
    run = tmp_path / "run"
    shutil.copytree(root / "resumed", run)
    argv = [*RESUMED, "--model", tiny_dir, *one_thread]
    single = tmp_path / "single"
    for extra, out in ((["--limit", "5"], single), (["--limit", "5", "--resume"], run)):
        code, _, err = run_cli([*argv, *extra, "--output", str(out)], capsys)
        assert code == 0, err
    assert [r["id"] for r in _rows(run)] == [r["id"] for r in _rows(single)]
    assert _differences(_rows(single), _rows(run)) == []
    # a later resume with a smaller --limit keeps the rows it no longer asks for
    code, _, err = run_cli([*argv, "--limit", "2", "--resume", "--output", str(run)], capsys)
    assert code == 0, err
    assert [r["id"] for r in _rows(run)] == [r["id"] for r in _rows(single)]


def test_barrier_timeout_is_long_and_configurable(monkeypatch):
    monkeypatch.delenv("CTXLEAK_DIST_TIMEOUT_S", raising=False)
    assert barrier_timeout().total_seconds() >= 24 * 3600
    monkeypatch.setenv("CTXLEAK_DIST_TIMEOUT_S", "90")
    assert barrier_timeout().total_seconds() == 90


@pytest.mark.integration
def test_accelerate_launch_equals_single_process(tiny_dir, data_files, tmp_path, capsys,
                                                 one_thread):
    """``accelerate launch --multi_gpu`` starts the processes through torch's launcher (on CPUs
    too, with gloo): same shards, same merged samples."""
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    if not os.path.exists(accelerate):
        pytest.skip("accelerate's launcher is not installed beside this Python")
    argv = [*COMMANDS["susceptibility"](data_files), "--model", tiny_dir]
    code, _, err = run_cli([*argv, *one_thread, "--output", str(tmp_path / "single")], capsys)
    assert code == 0, err
    proc = subprocess.run([accelerate, "launch", "--multi_gpu", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend",
                           "no", "-m", "ctxleak", *argv, "--output", str(tmp_path / "multi")],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "multi" / "samples.rank1.jsonl").is_file()
    assert _differences(_rows(tmp_path / "single"), _rows(tmp_path / "multi")) == []
