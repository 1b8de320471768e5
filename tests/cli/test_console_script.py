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


def test_sigterm_stops_influence_with_its_finished_examples_saved(tiny_dir, tmp_path):
    """SIGTERM (``timeout``, a scheduler) ends ``ctxleak influence`` as Ctrl-C does: exit 143,
    the finished examples kept, the line saying how to resume (issue 85: it went on)."""
    import signal
    import time

    import ctxleak

    script = Path(sys.executable).with_name("ctxleak")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable} (pip install -e .)")
    out = tmp_path / "run"
    src = str(Path(ctxleak.__file__).resolve().parents[1])  # this checkout's code
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
    proc = subprocess.Popen([str(script), "influence", "--model", tiny_dir, "--data", "demo",
                             "--limit", "200", "--max-new-tokens", "8", "--min-new-tokens", "8",
                             "--batch-size", "1", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 600
    while not (samples.exists() and samples.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no example finished in 600 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 143, err[-3000:]
    kept = len(samples.read_text().splitlines())
    assert 2 <= kept < 200
    assert f"interrupted: {kept} finished example(s) are saved in {out}" in err
