"""Import the modules named on the command line, so that Python writes their bytecode
(``__pycache__``) once, before the processes that need them start.

scripts/check.sh runs it in the background beside its single-threaded phases (lint, types,
docs), once with the main virtualenv's modules and once with the vLLM server's: every process the
tests start (two pytest workers, the torchrun and accelerate launches, the console script, the
notebook kernel, the server's own processes) then reads bytecode instead of compiling each
module it imports from source. A module that cannot be imported is named on stderr and skipped:
warming is never a failure.

Usage: python scripts/warm_bytecode.py MODULE [MODULE ...]
"""

from __future__ import annotations

import importlib
import sys
import warnings


def main(names: list[str]) -> None:
    warnings.simplefilter("ignore")
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - warming only: name it and go on
            print(f"warm_bytecode: {name}: {type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
