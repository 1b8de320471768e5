"""examples/api.ipynb is the README's Python API, one cell per block, each cell ending with the
result it made so that the notebook shows it; running the notebook on the default model (the
tiny limits written in the README) is how the README's blocks are run as a new user would run
them, in a fresh working directory, and shows every result rendered as HTML in a notebook."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.readme_blocks import python_api_blocks

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "api.ipynb"
#: The name of the result each README block makes, shown by the last line of its cell.
SHOWN = ("inf", "icl", "aud", "sus", "pii", "mine")


def _code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_the_notebook_is_the_readmes_python_api():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = _code_cells(nb)
    blocks = [b.rstrip("\n") for b in python_api_blocks()]
    assert len(cells) == len(blocks) == len(SHOWN)
    for cell, block, name in zip(cells, blocks, SHOWN):
        assert cell == f"{block}\n{name}", (cell, block)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored clean


@pytest.mark.integration
def test_the_notebook_runs_the_readme_and_each_result_renders_html(tmp_path, monkeypatch):
    # The kernel runs unmeasured: coverage's tracer made it about 1.4 times as long (131 against
    # 95 CPU seconds), and what it runs (the Python API on the default model) is measured in the
    # fast tier on tiny models and in the console script's subprocess on the default model.
    monkeypatch.delenv("COVERAGE_PROCESS_CONFIG", raising=False)
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the traceback if a block fails
    code = [c for c in nb.cells if c.cell_type == "code"]
    printed = "".join(o.get("text", "") for c in code for o in c.outputs
                      if o.get("output_type") == "stream")
    assert "Expected context influence" in printed and "PII probing" in printed
    for cell in code:
        html = [o["data"]["text/html"] for o in cell.outputs
                if o.get("output_type") == "execute_result" and "text/html" in o.get("data", {})]
        assert html and "<table" in html[0] and "<html" not in html[0], cell.source
    for run in ("api-inf", "api-icl", "api-audit", "api-susc", "api-probe", "api-mine"):
        assert (tmp_path / "runs" / run / "report.html").is_file(), run


def test_the_tutorial_shows_the_readmes_python_api():
    page = (NOTEBOOK.parents[1] / "docs" / "tutorial.md").read_text(encoding="utf-8")
    shown = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert [b.rstrip("\n") for b in shown] == [b.rstrip("\n") for b in python_api_blocks()]
