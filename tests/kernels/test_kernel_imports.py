"""The kernels load nothing of ctxleak's other layers and nothing heavier than torch: what an
import of them actually puts in ``sys.modules``, in a fresh interpreter (the import-linter
contract "Kernels import only torch" checks the import statements). A subprocess that imports
torch: the integration tier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"

CHECK = """
import sys
import torch
before = set(sys.modules)
import ctxleak.kernels.cid, ctxleak.kernels.draw
own = ("ctxleak", "ctxleak._version", "ctxleak.registry")  # the package face, kept light
added = [m for m in set(sys.modules) - before
         if m not in own and not m.startswith("ctxleak.kernels")]
assert "transformers" not in sys.modules and not added, sorted(added)
"""


def test_importing_the_kernels_loads_only_torch():
    """Beyond what ``import torch`` loads itself, the kernels load only their own modules and
    the package face (``ctxleak/__init__.py``: the version and the lazy name registry)."""
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
