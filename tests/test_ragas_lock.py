"""scripts/ragas-lock.txt, the list scripts/setup_ragas.sh installs without resolving, holds the
versions its resolving fallback asks for, each package once and exactly pinned."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_the_lock_pins_what_the_fallback_asks_for() -> None:
    pins = re.search(r"^PINS=\((.*)\)$", (SCRIPTS / "setup_ragas.sh").read_text(),
                     flags=re.MULTILINE)
    assert pins is not None
    wanted = dict(p.split("==") for p in pins[1].split())
    lines = [line for line in (SCRIPTS / "ragas-lock.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    locked = dict(line.split("==") for line in lines)
    assert len(locked) == len(lines)  # each package once, each exactly pinned
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) for name in locked)
    assert {name: locked.get(name) for name in wanted} == wanted
    # ./.venv's own packages are never installed into the layered virtualenv
    assert not {"torch", "transformers", "numpy", "ctxleak"} & set(locked)
