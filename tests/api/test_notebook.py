"""examples/api.ipynb runs top to bottom on the default model (tiny limits) and every method's
result renders as HTML in the notebook."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "api.ipynb"
METHOD_CALLS = ("ctxleak.influence(", "ctxleak.iclinf(", "ctxleak.audit(",
                "ctxleak.susceptibility(", "ctxleak.probe(")


def test_the_notebook_has_one_cell_per_method():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    for call in METHOD_CALLS:
        assert sum(call in c for c in code) == 1, call
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored clean


@pytest.mark.integration
def test_the_notebook_runs_and_each_result_renders_html(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    for cell in nb.cells:
        if cell.cell_type != "code" or not any(c in cell.source for c in METHOD_CALLS):
            continue
        html = [o["data"]["text/html"] for o in cell.outputs
                if o.get("output_type") == "execute_result" and "text/html" in o.get("data", {})]
        assert html and "<table" in html[0] and "<html" not in html[0], cell.source
    assert (tmp_path / "runs" / "nb-influence" / "report.html").is_file()
    last = nb.cells[-1].outputs[0]["data"]
    assert "text/html" in last and "influence" in last["text/html"]
