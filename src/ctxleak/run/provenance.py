"""Provenance recorded in every ``results.json``: versions, platform, model identity."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from ctxleak._version import __version__
from ctxleak.engine.lm import LanguageModel
from ctxleak.kernels.draw import DRAW


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def provenance(lm: LanguageModel | None = None, **extra: Any) -> dict[str, Any]:
    """Versions of ctxleak, torch and transformers, the Python and platform, the seeded draw
    that made the sampled tokens, and the model's id, source, revision or file hash, dtype and
    device."""
    out: dict[str, Any] = {
        "ctxleak": __version__,
        "draw": DRAW,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    if lm is not None:
        out["model"] = lm.info.to_dict()
        out["model"]["bos_ids"] = list(lm.bos_ids)
        out["model"]["eos_ids"] = list(lm.eos_ids)
        # the x axis of "against model size" comparisons (Fig. 4 of "Estimating Privacy
        # Leakage of Augmented Contextual Knowledge in Language Models")
        parameters = lm.parameter_count()
        if parameters is not None:
            out["model"]["parameters"] = parameters
    out.update(extra)
    return out
