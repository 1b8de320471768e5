"""The full check's two pytest-xdist workers share one real vLLM server: every test module that
asks for the session's server (a test or fixture with a ``vllm_server`` or ``vllm_py``
parameter) falls in one unit of work (tests/conftest.py, ``work_unit``). A session fixture is
made once per worker, so a real-server module outside it started a second server on the other
worker: 151 s of a CI run went to that start alone, beside the first server's tests."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import work_unit

TESTS = Path(__file__).resolve().parent
REAL_SERVER_FIXTURES = {"vllm_server", "vllm_py"}


def real_server_modules() -> list[str]:
    """Test modules (paths from the repository root) with a function that takes the session's
    server or the server's Python as a parameter."""
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if not any(name in text for name in REAL_SERVER_FIXTURES):
            continue  # no parameter can have the name: nothing to parse
        tree = ast.parse(text)
        params = {arg.arg for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                  for arg in node.args.args}
        if params & REAL_SERVER_FIXTURES:
            found.append(str(path.relative_to(TESTS.parent)))
    return found


def test_every_real_server_module_runs_in_one_unit_of_work():
    modules = real_server_modules()
    assert "tests/served/test_served_proxy.py" in modules  # the search finds what it should
    assert len(modules) >= 5
    units = {module: work_unit(f"{module}::test_x") for module in modules}
    assert set(units.values()) == {"vllm"}, units


def test_every_other_module_is_a_unit_of_its_own():
    assert work_unit("tests/served/test_fake_served.py::test_x[a]") == \
        "tests/served/test_fake_served.py"
    assert work_unit("tests/api/test_docs.py::test_y") != work_unit("tests/api/test_readme.py::t")
