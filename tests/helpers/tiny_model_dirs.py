"""Tiny model folders on disk (the Hugging Face layout) and broken copies of them, for the
model-loading checks: each broken kind is one way a real folder goes wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.tiny_models import tiny_llama


def tiny_llama_dir(path: Path, seed: int = 0) -> Path:
    """A loadable tiny Llama folder: config.json, model.safetensors, tokenizer files."""
    lm = tiny_llama(seed=seed)
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return path


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _cut(folder: Path, keep: int) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:keep])


BROKEN = {  # kind -> how a good folder is broken into it
    "corrupt weights": lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 100),
    "truncated weights": lambda d: _cut(d, 5000),
    "no config": lambda d: (d / "config.json").unlink(),
    "config not JSON": lambda d: (d / "config.json").write_text("{not json"),
    "unknown architecture": lambda d: _edit_config(d, model_type="foobar",
                                                  architectures=["FoobarForCausalLM"]),
    "no tokenizer": lambda d: [(d / n).unlink() for n in ("tokenizer.json",
                                                          "tokenizer_config.json")],
    "no weights": lambda d: (d / "model.safetensors").unlink(),
}


def broken_dir(good: Path, kind: str, where: Path) -> Path:
    """A copy of the folder ``good`` at ``where``, broken as :data:`BROKEN` ``[kind]``."""
    shutil.copytree(good, where)
    BROKEN[kind](where)
    return where
