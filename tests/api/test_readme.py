"""The README's Python API: one block per method, each a few lines (the notebook
examples/api.ipynb runs them on the default model: tests/api/test_notebook.py)."""

from __future__ import annotations

from helpers.readme_blocks import python_api_blocks


def test_the_readme_has_a_block_per_method():
    blocks = python_api_blocks()
    code = "\n".join(blocks)
    for call in ("ctxleak.influence(", "ctxleak.iclinf(", "ctxleak.audit(", "ctxleak.dp.",
                 "ctxleak.susceptibility(", "ctxleak.probe(", "ctxleak.load_result("):
        assert call in code, call
    for block in blocks[1:-1]:  # one method each: 3 to 6 lines
        assert 2 <= len(block.strip().splitlines()) <= 6, block
