"""Run several ctxleak commands one after another in one process, through the CLI's entry point
(``ctxleak.cli.app.main``): launched by torchrun, each worker runs them all, so one launch of
two workers covers every command (tests/run/test_distributed.py) instead of one launch each.

Usage: ``python -m torch.distributed.run ... tests/helpers/run_many.py PLAN.json``. PLAN.json is
a list of ``{"argv": [...], "snapshot": [paths]}``: after a command, the main process copies
each ``snapshot`` file to ``PATH.before`` (what a later command must leave unchanged). Exits 1
at the first command that fails, naming it."""

from __future__ import annotations

import json
import shutil
import sys


def main(plan_file: str) -> int:
    from ctxleak.cli.app import main as ctxleak
    from ctxleak.run.distributed import barrier, current_world

    world = current_world()
    for step in json.loads(open(plan_file, encoding="utf-8").read()):
        try:
            ctxleak(list(step["argv"]))
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        print(f"[run_many rank {world.rank}] exit {code}: ctxleak {' '.join(step['argv'])}",
              file=sys.stderr, flush=True)
        if code:
            return 1
        barrier()
        if world.is_main:
            for path in step.get("snapshot", []):
                shutil.copyfile(path, path + ".before")
        barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
