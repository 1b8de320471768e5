"""The ``ctxleak`` console script that pip installs: one real subprocess (a fresh interpreter
that imports torch), so that the entry point itself, its exit status and its output are met
once. Every other CLI test calls the same entry point (``ctxleak.cli.app:main``) in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_console_script_runs_a_command_and_exits_0(tiny_dir, tmp_path):
    script = Path(sys.executable).with_name("ctxleak")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable} (pip install -e .)")
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(script), "influence", "--model", tiny_dir, "--data", "demo",
                           "--limit", "1", "--max-new-tokens", "3", "--min-new-tokens", "1",
                           "--output", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert str(out) in done.stdout
    assert len((out / "samples.jsonl").read_text().splitlines()) == 1
    assert json.loads((out / "results.json").read_text())["summary"]["settings"]
    bad = subprocess.run([str(script), "influence", "--limit", "0"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert bad.returncode == 2 and "--limit" in bad.stderr
