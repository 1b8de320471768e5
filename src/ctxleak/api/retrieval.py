"""Retrievers at the faces: :func:`retrieve` (a RAG pipeline's retriever asked for each query's
documents, :mod:`ctxleak.methods.rag.retrieval`) and :func:`load_retriever`, the object a
``--retriever PATH.py:NAME`` or ``module:NAME`` flag names ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", Def. 3.1 with S = one retrieved
document)."""

from __future__ import annotations

import importlib.util
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.rag.retrieval import retrieve


def load_retriever(spec: str) -> Any:
    """The object ``spec`` names: ``path/to/file.py:NAME`` (the file run as a module) or
    ``package.module:NAME`` (imported). ``NAME`` is the retriever itself (a LangChain or
    LlamaIndex retriever, a Haystack component, or a function query -> documents). A spec that
    names nothing is a :class:`ConfigError` saying what was missing."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"retriever must be PATH.py:NAME or module:NAME, not {spec!r}",
                          param="retriever")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"retriever {spec}: the file {where} does not exist", param="retriever")
        module_name = f"ctxleak_retriever_{abs(hash(str(path.resolve())))}"
        loader = importlib.util.spec_from_file_location(module_name, path)
        if loader is None or loader.loader is None:
            raise ConfigError(f"retriever {spec}: cannot load {where} as Python", param="retriever")
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module  # dataclasses and pickling look the module up
        try:
            loader.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file failed to run
            raise ConfigError(f"retriever {spec}: running {where} failed: "
                              f"{type(exc).__name__}: {exc}",
                              param="retriever") from exc
    else:
        try:
            module = import_module(where)
        except ImportError as exc:
            raise ConfigError(f"retriever {spec}: cannot import module {where!r} ({exc})",
                              param="retriever") from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module failed to run
            raise ConfigError(f"retriever {spec}: importing {where} failed: "
                              f"{type(exc).__name__}: {exc}", param="retriever") from exc
    if not hasattr(module, name):
        raise ConfigError(f"retriever {spec}: {where} has no {name!r}", param="retriever")
    return getattr(module, name)


__all__ = ["load_retriever", "retrieve"]
