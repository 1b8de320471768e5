"""The README's Python API blocks (the section "Python API"), in order: what the notebook
examples/api.ipynb runs, one cell per block."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_api_blocks() -> list[str]:
    """The code of each ```python block of the README's "Python API" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)
