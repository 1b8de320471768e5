"""What differs between runs, as the labels of a comparison: ``λ = 1 vs λ = 0.5``,
``model = SmolLM2-135M-Instruct vs model = gpt2``. Runs are described by their config (the
model by its name), without what does not change a result (the output folder, the device, the
batch size: batch-invariant by default) and without the sweep lists the settings cover."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxleak.run.rundir import DRAW_KEY, INPUTS_KEY, MODEL_KEY

#: Config keys that do not change what a run measures, or that other keys already say.
IGNORED = frozenset({"command", "output", "resume", "progress", "threads", "device",
                     "device_map", "batch_size", "batch_invariant", "limit", INPUTS_KEY,
                     MODEL_KEY, DRAW_KEY, "trust_remote_code"})
#: How config keys are printed.
NAMES = {"lambda": "λ", "temperature": "T"}


def model_name(result: Any) -> str:
    """The run's model: its name, or the last part of a local path."""
    name = str((result.provenance.get("model") or {}).get("name")
               or result.config.get("model") or "model")
    return Path(name).name if os.sep in name.rstrip(os.sep) else name


def run_attributes(result: Any, sweeps: Sequence[str] = ()) -> dict[str, Any]:
    """The run's config as ``name -> value``: the model by its name, nested values flattened
    (``icl.calibrated``), without :data:`IGNORED` and the ``sweeps`` its settings cover."""
    attrs: dict[str, Any] = {"model": model_name(result)}
    for key, value in result.config.items():
        if key in IGNORED or key in sweeps or key == "model":
            continue
        if isinstance(value, list) and len(value) == 1:  # a sweep of one value: the value
            value = value[0]
        if isinstance(value, dict):
            for sub, v in value.items():
                attrs[f"{key}.{sub}"] = v
        else:
            attrs[key] = value
    return attrs


def differing(attrs: Sequence[dict[str, Any]]) -> list[str]:
    """The names whose values are not the same in every one of ``attrs``, in first-seen
    order."""
    names: list[str] = []
    for a in attrs:
        names += [k for k in a if k not in names]
    return [k for k in names if len({_text(a.get(k)) for a in attrs}) > 1]


def describe(attrs: dict[str, Any], names: Sequence[str]) -> str:
    """``gpt2, λ = 1``: the values of ``names`` in ``attrs`` (the model by its name)."""
    return ", ".join(_text(attrs.get(k)) if k == "model" else
                     f"{NAMES.get(k, k)} = {_text(attrs.get(k))}" for k in names)


def side_labels(attrs: Sequence[dict[str, Any]], fallback: Sequence[str]) -> list[str]:
    """One label per side by what differs between them (``fallback`` where nothing does, or
    where two sides would print alike)."""
    names = differing(attrs)
    labels = [describe(a, names) if names else fb for a, fb in zip(attrs, fallback)]
    if len(set(labels)) < len(labels):
        labels = [f"{lab} ({fb})" if lab != fb else lab for lab, fb in zip(labels, fallback)]
    return labels


def pair_label(left: dict[str, Any], right: dict[str, Any], fallback: tuple[str, str]) -> str:
    """``λ = 1 vs λ = 0.5``: what differs between two sides."""
    names = differing([left, right])
    if not names:
        return f"{fallback[0]} vs {fallback[1]}"
    if names == ["model"]:
        return f"model {_text(left['model'])} vs {_text(right['model'])}"
    return f"{describe(left, names)} vs {describe(right, names)}"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


__all__ = ["differing", "describe", "model_name", "pair_label", "run_attributes",
           "side_labels"]
