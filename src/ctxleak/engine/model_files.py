"""A model as files on disk: the fingerprint that resume checks, and the checks that turn a
broken model folder into one clear error before transformers reads it.

Fingerprint. A run folder's rows must all come from one set of weights: resume refuses a model
whose files changed between a kill and ``resume=True``. The fingerprint is the SHA-256 of each
file that decides the numbers (weights, config, tokenizer, chat template), by file name. A file
is streamed once per version: its digest is remembered under its path, size, inode, mtime and
ctime (ctime cannot be set back by ``touch`` or ``cp -p``, so any rewrite is hashed again), so a
later run of the same folder reads only ``stat`` results. Measured on this machine (2 shared
cores, under load): 0.20 s to hash the default model's 98 MB GGUF the first time, 0.5 ms for
each later run.

Folder checks. A folder that transformers would reject with a traceback (no weights, a
truncated or corrupt ``.safetensors``, a config that is not JSON or names an architecture this
transformers does not know, no tokenizer) is refused with one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from contextlib import suppress
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError

# files that decide a model's numbers: weights, configs (JSON), tokenizers, templates, code
FINGERPRINT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json",
                                  ".model", ".txt", ".jinja", ".tiktoken", ".py"})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "tokenizer.tiktoken")
SAFETENSORS_MAX_HEADER = 100 << 20  # bytes; safetensors' own limit
MEMO_MIN_BYTES = 16 << 20  # smaller files are hashed faster than a memo is looked up


def file_sha256(path: Path, memo_dir: Path | None = None,
                memo_min_bytes: int = MEMO_MIN_BYTES) -> str:
    """Hex SHA-256 of ``path``'s bytes. A file of ``memo_min_bytes`` or more has its digest
    remembered in ``memo_dir`` under its (resolved path, size, inode, mtime, ctime), so an
    unchanged file is read only once."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_ino}|{st.st_mtime_ns}|{st.st_ctime_ns}"
    memo = (memo_dir / hashlib.sha256(key.encode()).hexdigest()[:32]
            if memo_dir is not None and st.st_size >= memo_min_bytes else None)
    if memo is not None and memo.is_file():
        known = memo.read_text(encoding="ascii").strip()
        if len(known) == 64:
            return known
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    hexdigest = digest.hexdigest()
    if memo is not None:
        _write_memo(memo, hexdigest)
    return hexdigest


def _write_memo(memo: Path, hexdigest: str) -> None:
    """Best effort: a read-only cache only costs a re-hash next time."""
    with suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(hexdigest + "\n", encoding="ascii")
        os.replace(tmp, memo)


def fingerprint_files(path: Path) -> list[Path]:
    """The files whose bytes make up the model at ``path`` (a ``.gguf`` file, or the top level
    of a model folder: weights, JSON configs, tokenizer files, templates), sorted by name."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir()
                  if p.is_file() and not p.name.startswith(".")
                  and p.suffix in FINGERPRINT_SUFFIXES)


def fingerprint(path: Path, memo_dir: Path | None = None,
                memo_min_bytes: int = MEMO_MIN_BYTES) -> dict[str, str]:
    """``{file name: SHA-256}`` of the model at ``path`` (see :func:`fingerprint_files`);
    ``memo_dir``, ``memo_min_bytes``: as :func:`file_sha256`."""
    return {p.name: file_sha256(p, memo_dir, memo_min_bytes) for p in fingerprint_files(path)}


def fingerprint_changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two fingerprints, as short phrases naming the files."""
    out = [f"{name} changed" for name in sorted(set(before) & set(now))
           if before[name] != now[name]]
    out += [f"{name} is gone" for name in sorted(set(before) - set(now))]
    out += [f"{name} is new" for name in sorted(set(now) - set(before))]
    return out


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a ``.safetensors`` file (tensor name -> dtype, shape, data_offsets),
    checked against the file's size: a corrupt or truncated file is a ConfigError naming it."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or n > min(SAFETENSORS_MAX_HEADER, size - 8):
            raise ConfigError(f"{path} is not a safetensors file, or is cut short ({size} "
                              "bytes): download or copy it again")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            header = None
    if not isinstance(header, dict):
        raise ConfigError(f"{path} has a damaged safetensors header: download or copy it again")
    ends = [int(v["data_offsets"][1]) for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
    if 8 + n + max(ends, default=0) > size:
        raise ConfigError(f"{path} is cut short: its header describes "
                          f"{8 + n + max(ends)} bytes, the file has {size}: download or copy "
                          "it again")
    return header


def check_model_dir(path: Path, *, trust_remote_code: bool = False) -> None:
    """Refuse, with one line naming the file, a model folder transformers cannot load: no or
    unreadable config.json, an architecture this transformers does not know, no weight files,
    a corrupt or truncated ``.safetensors``, no tokenizer files."""
    config = _read_config(path / "config.json")
    _check_architecture(path / "config.json", config, trust_remote_code)
    weights = [p for p in path.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES
               and not p.name.startswith(("training_args", "optimizer", "scheduler", "rng_"))]
    if not weights:
        raise ConfigError(f"{path} has no weight files (model.safetensors, pytorch_model.bin "
                          "or their shards): not a complete model folder")
    for weight in weights:
        if weight.suffix == ".safetensors":
            safetensors_header(weight)
    if not _has_tokenizer(path, trust_remote_code):
        raise ConfigError(f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): "
                          "save the tokenizer next to the model (tokenizer.save_pretrained)")


def _has_tokenizer(path: Path, trust_remote_code: bool) -> bool:
    """Whether the folder holds a tokenizer: one of :data:`TOKENIZER_FILES`, a ``*.tiktoken``
    vocabulary, or (with the folder's own code trusted) a tokenizer_config.json."""
    if any((path / name).is_file() for name in TOKENIZER_FILES) or any(path.glob("*.tiktoken")):
        return True
    return trust_remote_code and (path / "tokenizer_config.json").is_file()


def _read_config(config_path: Path) -> dict[str, Any]:
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # not JSON, not UTF-8
        raise ConfigError(f"{config_path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{config_path} is not readable JSON (nested more deeply than the "
                          "parser's limit of about 1,000 levels)") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{config_path} is not a JSON object")
    return config


def _check_architecture(config_path: Path, config: dict[str, Any], trust_remote_code: bool) -> None:
    from transformers import CONFIG_MAPPING, __version__  # lazy: the CLI imports this at startup

    model_type = config.get("model_type")
    if trust_remote_code and "auto_map" in config:
        return
    if not model_type:
        raise ConfigError(f"{config_path} has no model_type: not a transformers model config")
    if model_type not in CONFIG_MAPPING:
        raise ConfigError(f"{config_path}: model_type '{model_type}' is not known to "
                          f"transformers {__version__}; upgrade transformers, or pass "
                          "trust_remote_code=True if the folder brings its own code",
                          also=("trust_remote_code",))
