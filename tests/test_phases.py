"""scripts/phases.sh's side-by-side phases: every phase runs, each one's output is printed whole
(never interleaved) in the order started, a failing one is named and stops the script with
status 1, and the phases' times are in the summary."""

from __future__ import annotations

import subprocess
from pathlib import Path

PHASES = Path(__file__).resolve().parents[1] / "scripts" / "phases.sh"


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "check_like.sh"
    script.write_text(f"set -euo pipefail\nsource {PHASES}\n{body}\n")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)


def test_side_by_side_phases_print_whole_and_in_order(tmp_path: Path) -> None:
    done = _run(tmp_path, "phase_async slow bash -c 'echo a1; sleep 0.3; echo a2'\n"
                          "phase_async quick bash -c 'echo b1; echo b2 >&2'\n"
                          "phases_wait\necho after")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "after\n"
    err = done.stderr
    assert err.index("a1\na2\n") < err.index("== phase 'slow'") < err.index("b1\nb2\n") \
        < err.index("== phase 'quick'")
    assert "(exit 0)" in err and "failed" not in err


def test_a_failing_phase_is_named_and_stops_the_script(tmp_path: Path) -> None:
    done = _run(tmp_path, "phase_async good true\n"
                          "phase_async bad bash -c 'echo broken; exit 4'\n"
                          "phase_async also true\n"
                          "phases_wait\necho not reached")
    assert done.returncode == 1
    assert "not reached" not in done.stdout
    assert "== phase 'bad': " in done.stderr and "(exit 4)" in done.stderr
    assert "== failed: bad (exit 4)" in done.stderr and "broken" in done.stderr
    # every phase still ran to its end and is in the summary
    summary = done.stderr.split("== wall-clock time of each phase (seconds)")[1]
    assert [line.split()[-1] for line in summary.strip().splitlines()] == ["good", "bad", "also"]
    assert not list(tmp_path.glob("tmp*"))
