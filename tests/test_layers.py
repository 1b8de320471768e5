"""The import graph keeps the layers of pyproject.toml's ``[tool.importlinter]`` contracts:
each layer imports only those below it, and no subpackage has a circle. CI also runs
``lint-imports``; this test fails on the same violations for anyone running pytest alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import ctxleak

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("importlinter.cli")
    # The graph is built from the ctxleak that is imported here, so check it is this tree's.
    assert Path(ctxleak.__file__).resolve().is_relative_to(PYPROJECT.parent / "src")
    exit_code = cli.lint_imports(config_filename=str(PYPROJECT), no_cache=True)
    report = capsys.readouterr().out
    assert exit_code == 0, report
    assert "0 broken" in report
