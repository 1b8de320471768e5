"""The run layer: the Method protocol, ``run_method`` (run directory, resume,
data-parallel shards, progress, results.json, report), run options, input data in any form,
provenance. ``from ctxleak.run import run_method, Method, RunOptions``."""

from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import run_method

__all__ = ["Method", "RunOptions", "run_method"]
