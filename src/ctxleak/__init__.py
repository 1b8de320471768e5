"""ctxleak: how much of what a language model said came from the private context it was given.

Library first: ``import ctxleak`` gives plain functions and result objects; the ``ctxleak`` CLI
is a thin layer over them. See README.md and SPEC.md for the methods and the papers.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "cid_generate", "load_model"]


def __getattr__(name: str):  # lazy: keep ``import ctxleak`` light (no torch at import time)
    if name == "load_model":
        from ctxleak.engine.models import load_model

        return load_model
    if name == "cid_generate":
        from ctxleak.integrations.transformers import cid_generate

        return cid_generate
    raise AttributeError(f"module 'ctxleak' has no attribute {name!r}")
