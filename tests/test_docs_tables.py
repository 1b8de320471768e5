"""Commands in the docs' tables are never broken mid-word: the site's own stylesheet keeps
inline code in a table cell on one line, and mkdocs.yml loads it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_code_in_table_cells_does_not_break():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"),  # noqa: S506
                       Loader=yaml.BaseLoader)
    sheets = config.get("extra_css") or []
    rules = "".join((ROOT / "docs" / s).read_text(encoding="utf-8") for s in sheets)
    for cell in ("td code", "th code"):
        block = re.search(rf"{cell}[^{{]*\{{([^}}]*)\}}", rules)
        assert block and "white-space: nowrap" in block[1], (cell, sheets)


def test_the_home_page_table_names_commands_as_code():
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "ctxleak " in line]
    assert rows and all("`ctxleak " in row for row in rows)  # styled by the rule above
