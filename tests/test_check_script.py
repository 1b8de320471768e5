"""scripts/check.sh's exit status is its phases' status, whatever its exit trap finds to stop."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[1] / "scripts" / "check.sh"


def _exit_trap() -> str:
    traps = re.findall(r"^trap '(.*)' EXIT$", CHECK.read_text(), flags=re.MULTILINE)
    assert len(traps) == 1, f"{CHECK}: expected one EXIT trap, found {len(traps)}"
    return traps[0]


# the bytecode warmer has long finished when the tests end: nothing is left to stop, pkill
# exits 1, and under set -e a failing command in the trap made the whole check exit 1 (CI
# failed so with every phase at exit 0); a failing phase's own status must come through too
@pytest.mark.parametrize(("last", "status", "out"), [("echo phases passed", 0, "phases passed\n"),
                                                     ("exit 3", 3, "")])
def test_the_exit_trap_keeps_the_phases_status(tmp_path: Path, last: str, status: int,
                                               out: str) -> None:
    script = tmp_path / "check_like.sh"
    script.write_text("set -euo pipefail\n"
                      f"SITE=$(mktemp -d -p {tmp_path})\n"
                      "true &\nWARMING=$!\nwait\n"
                      f"trap '{_exit_trap()}' EXIT\n"
                      f"{last}\n")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (status, out), done.stderr
    assert list(tmp_path.iterdir()) == [script]  # the trap removed the built site
