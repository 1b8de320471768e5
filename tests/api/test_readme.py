"""The README's Python API blocks run as a new user would run them (default model, the tiny
limits written in the blocks), in a fresh working directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_api_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_readme_has_a_block_per_method():
    blocks = python_api_blocks()
    code = "\n".join(blocks)
    for call in ("ctxleak.influence(", "ctxleak.iclinf(", "ctxleak.audit(", "ctxleak.dp.",
                 "ctxleak.susceptibility(", "ctxleak.probe(", "ctxleak.load_result("):
        assert call in code, call
    for block in blocks[1:-1]:  # one method each: 3 to 6 lines
        assert 2 <= len(block.strip().splitlines()) <= 6, block


@pytest.mark.integration
def test_readme_python_api_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in python_api_blocks():
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
    out = capsys.readouterr().out
    assert "Expected context influence" in out and "PII probing" in out
    for name in ("inf", "icl", "aud", "sus", "pii", "mine"):
        result = namespace[name]
        assert result.records and "<table" in result._repr_html_()
        assert (tmp_path / result.path / "report.html").is_file()
