"""Data-parallel runs: torchrun with 2 CPU processes on gloo equals a single-process run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ctxleak.run.distributed import World, current_world


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
        assert x["influence"] == pytest.approx(y["influence"], abs=1e-5)
    ra = json.loads((single / "results.json").read_text())["summary"]["settings"][0]
    rb = json.loads((multi / "results.json").read_text())["summary"]["settings"][0]
    assert ra["influence"]["mean"] == pytest.approx(rb["influence"]["mean"], abs=1e-5)
    # resume per shard: nothing left to do, files unchanged
    before = (multi / "samples.rank1.jsonl").read_text()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "-m", "ctxleak", *args, "--resume",
                           "--output", str(multi)], env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (multi / "samples.rank1.jsonl").read_text() == before
