"""The run layer: the Method protocol, ``run_method`` (run directory, resume,
data-parallel shards, progress, results.json, report), run options, input data in any form,
provenance. ``from ctxleak.run import run_method, Method, RunOptions``.

The three names load on first use (PEP 562), so that a light module of this package (say
:mod:`ctxleak.run.atomic`, which the report's writers use) does not import the runner and torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxleak.run.method import Method
    from ctxleak.run.options import RunOptions
    from ctxleak.run.runner import run_method

_WHERE = {"Method": "ctxleak.run.method", "RunOptions": "ctxleak.run.options",
          "run_method": "ctxleak.run.runner"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'ctxleak.run' has no attribute {name!r}")


__all__ = ["Method", "RunOptions", "run_method"]
