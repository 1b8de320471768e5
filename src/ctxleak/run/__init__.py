"""The run layer: the Method protocol, ``run_method`` (run directory, resume,
data-parallel shards, progress, results.json, report), run options, input data in any form,
provenance. ``from ctxleak.run import run_method, Method, RunOptions``.

The three names load on first use (PEP 562), so that a light module of this package (say
:mod:`ctxleak.run.atomic`, which the report's writers use) does not import the runner and torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxleak.run.method import Method
    from ctxleak.run.options import RunOptions
    from ctxleak.run.runner import run_method


def __getattr__(name: str) -> Any:
    # lazy on purpose (see the docstring); each name from its own module
    if name == "Method":
        from ctxleak.run.method import Method
        return Method
    if name == "RunOptions":
        from ctxleak.run.options import RunOptions
        return RunOptions
    if name == "run_method":
        from ctxleak.run.runner import run_method
        return run_method
    raise AttributeError(f"module 'ctxleak.run' has no attribute {name!r}")


__all__ = ["Method", "RunOptions", "run_method"]
