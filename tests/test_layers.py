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


@pytest.mark.parametrize("package", ["run", "results", "comparison", "report", "methods"])
def test_no_layer_finds_a_higher_one_by_name(package: str) -> None:
    """The contract above sees imports only; a lookup by name in the registry would be an upward
    call it cannot see. Below the faces nothing reads ``ctxleak.registry``: a run ends in plain
    data, a Result imports its report view."""
    for path in sorted((ROOT / "src" / "ctxleak" / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for use in ("from ctxleak.registry", "import ctxleak.registry", "import_module"):
            assert use not in text, (path, use)
