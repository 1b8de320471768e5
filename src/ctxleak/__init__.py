"""ctxleak: how much of what a language model said came from the private context it was given.

Library first: ``ctxleak.influence``, ``ctxleak.iclinf``, ``ctxleak.audit``,
``ctxleak.susceptibility`` and ``ctxleak.probe`` run a method over a dataset and return a Result
(``.records``, ``.summary``, ``.to_pandas()``, ``.to_html()``, ``.show()``, ``.save()``);
``ctxleak.load_result(dir)`` reads back any run directory; ``ctxleak.compare(results)`` pairs
runs of one method over the same data per example and lays them side by side; ``ctxleak.dp`` calibrates
and accounts the DP mechanism;
``ctxleak.load_model`` loads a model once for several runs; ``ctxleak.cid_generate`` is CID on
anyone's ``generate`` (:mod:`ctxleak.integrations`); ``ctxleak.retrieve`` asks a RAG pipeline's
retriever for each query's documents (``ctxleak.influence(queries, retriever=...)`` measures
each). The ``ctxleak`` CLI is a thin layer over
these. Nothing heavy (torch) is imported until a function is called.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ctxleak._version import __version__
from ctxleak.registry import API

__all__ = ["__version__", "dp", *API]


def __getattr__(name: str) -> Any:  # lazy: keep ``import ctxleak`` light (no torch at import)
    if name == "dp":
        return import_module("ctxleak.dp")
    if name in API:
        return API.get(name)
    raise AttributeError(f"module 'ctxleak' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
