"""The import graph keeps the layers of pyproject.toml's ``[tool.importlinter]`` contracts:
each layer imports only those below it, and no subpackage has a circle. CI also runs
``lint-imports``; this test fails on the same violations for anyone running pytest alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"

# import-linter writes through its own console: run it in a process of its own, so that streams
# other tests captured and closed are never its output (and its graph is this tree's ctxleak).
CHECK = ("import sys, ctxleak; from pathlib import Path; from importlinter.cli import lint_imports; "
         "assert Path(ctxleak.__file__).resolve().is_relative_to(Path(sys.argv[2]).resolve()), "
         "ctxleak.__file__; sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))")


def test_import_contracts_are_kept() -> None:
    pytest.importorskip("importlinter.cli")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", CHECK, str(PYPROJECT), str(ROOT / "src")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout
