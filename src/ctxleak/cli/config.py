"""YAML config files: ``--config FILE.yaml`` (defaults for any flag) and ``ctxleak run FILE.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxleak.errors import InputError


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of flag names (``max-new-tokens`` or ``max_new_tokens``) to values."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError("config file not found", file=str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", file=str(path),
                         line=None if line is None else line + 1) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError("a config file must be a mapping of flag names to values", file=str(path))
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, list):  # YAML lists become the CLI's comma lists
            value = ",".join(str(v) for v in value)
        out[str(key)] = value
    return out
