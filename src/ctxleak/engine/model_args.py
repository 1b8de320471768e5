"""The user's extra ``from_pretrained`` arguments (``--model-args k=v,...``, as
lm-evaluation-harness's ``--model_args``), parsed and checked before anything is loaded (no
heavy imports here: the CLI checks them at start)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from ctxleak.errors import ConfigError

#: ``from_pretrained`` arguments that have their own option (``--model-args`` may not set them).
OWN_OPTIONS = {"dtype": "dtype", "torch_dtype": "dtype", "device_map": "device_map",
               "trust_remote_code": "trust_remote_code", "revision": "revision"}


def _value(text: str) -> Any:
    """A ``--model-args`` value: true/false/none, an integer, a float, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        with suppress(ValueError):
            return kind(text)
    return text.strip()


def parse_model_args(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """``"attn_implementation=eager,low_cpu_mem_usage=true"`` (or a mapping) as the keyword
    arguments of ``from_pretrained``; a malformed pair, or a key that has its own option
    (``dtype``, ``revision``...), is a ConfigError naming ``model_args``."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        pairs = {str(k): v for k, v in value.items()}
    else:
        pairs = {}
        for part in str(value).split(","):
            if not part.strip():
                continue
            key, sep, text = part.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"model_args must be key=value pairs separated by commas, "
                                  f"e.g. attn_implementation=eager, not '{part.strip()}'",
                                  param="model_args")
            pairs[key.strip()] = _value(text)
    for key in pairs:
        if key in OWN_OPTIONS:
            raise ConfigError(f"model_args may not set '{key}': use the {OWN_OPTIONS[key]} "
                              "option instead", param="model_args")
        if not key.isidentifier():
            raise ConfigError(f"model_args key '{key}' is not a keyword name",
                              param="model_args")
    return pairs
