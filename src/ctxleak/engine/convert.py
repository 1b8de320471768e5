"""GGUF files to a safetensors cache folder, once: transformers dequantises the default model's
GGUF in about 19 s (:func:`gguf_read_once`); the converted folder then loads in about 0.2 s, and
is the folder a vLLM server is started on."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxleak.engine.catalogue import CACHE_FORMAT, cache_lock, gguf_cache_dir
from ctxleak.engine.model_files import file_sha256, safetensors_header
from ctxleak.errors import ConfigError


def say(message: str) -> None:
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


def hf_state_dict(model: Any) -> dict[str, Any]:
    """``model``'s tensors as the Hugging Face layout stores them: each tensor once, a tied
    output head under the input embedding's name (``model.embed_tokens.weight``, not
    ``lm_head.weight``), contiguous, on the CPU."""
    embeddings = model.get_input_embeddings()
    embed_name = next(f"{name}.weight" for name, module in model.named_modules()
                      if module is embeddings)
    kept: dict[tuple[int, tuple[int, ...]], str] = {}  # storage -> the name it is kept under
    out: dict[str, Any] = {}
    for name, tensor in model.state_dict().items():
        storage = (tensor.data_ptr(), tuple(tensor.shape))
        if storage in kept:  # a tied alias of a tensor already kept
            if name != embed_name:
                continue
            out.pop(kept[storage])
        kept[storage] = name
        out[name] = tensor.detach().to("cpu").contiguous()
    return out


#: held while the ``gguf`` package is changed (:func:`gguf_read_once`): conversions in two threads
#: of one process take turns, so neither puts back what the other changed
_GGUF_PATCHED = threading.Lock()


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within it, the ``gguf`` package gives one reader per file and one tensor-name map per
    (architecture, layer count). transformers reads a GGUF file three times to load it (config,
    tokenizer, weights; each read parses the default model's 49,152-token vocabulary) and builds
    gguf's tensor-name map once per module (397 times); both are only read. Measured on an idle
    2-core CPU: the default model converts in 19 s instead of 40, to the same bytes in every
    file. Where ``gguf`` lacks either name (another version), nothing is changed."""
    import gguf

    with _GGUF_PATCHED:  # the package's own names read and put back under the lock
        open_reader: Any = getattr(gguf, "GGUFReader", None)
        name_map: Any = getattr(gguf, "get_tensor_name_map", None)
        if open_reader is None or name_map is None:
            yield
            return
        yield from _patched(gguf, open_reader, name_map)


def _patched(gguf: Any, open_reader: Any, name_map: Any) -> Iterator[None]:
    """The body of :func:`gguf_read_once`, its lock held."""
    readers: dict[Any, Any] = {}

    def reader(path: Any, *args: Any, **kwargs: Any) -> Any:
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = open_reader(path, *args, **kwargs)
        return readers[key]

    setattr(gguf, "GGUFReader", reader)  # noqa: B010 - the module's own attribute, put back
    setattr(gguf, "get_tensor_name_map", functools.lru_cache(maxsize=None)(name_map))  # noqa: B010
    try:
        yield
    finally:
        setattr(gguf, "GGUFReader", open_reader)  # noqa: B010
        setattr(gguf, "get_tensor_name_map", name_map)  # noqa: B010


def convert_gguf(gguf: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantise a GGUF file once and save it in the Hugging Face layout: config.json with
    ``architectures``, generation_config.json, model.safetensors (:func:`hf_state_dict`) and
    the tokenizer files, so any reader of that layout loads the same model.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the tensors are written
    with ``safetensors.torch.save_file`` next to the config.
    """
    say(f"converting {gguf.name} to a safetensors cache in {out_dir} (once; about 20 s)")
    with gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    try:
        config = model.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        config.architectures = [type(model).__name__]
        config.save_pretrained(tmp)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(tmp)
        save_file(hf_state_dict(model), str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        meta = {"gguf": str(gguf.resolve()), "gguf_sha256": file_sha256(gguf),
                "cache_format": CACHE_FORMAT}
        (tmp / "ctxleak_source.json").write_text(json.dumps(meta, indent=1))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def converted(gguf: Path) -> tuple[Path, str | None]:
    """The safetensors cache folder of ``gguf`` (converted now if missing or damaged) and the
    GGUF's SHA-256."""
    cache_dir, _ = gguf_cache_dir(gguf)
    if not cache_ready(cache_dir):
        try:
            with cache_lock(cache_dir):
                if not cache_ready(cache_dir):
                    convert_gguf(gguf, cache_dir)
        except (ValueError, OSError, KeyError) as exc:  # a GGUF that transformers cannot read
            cache_dir.with_name(f".{cache_dir.name}.lock").unlink(missing_ok=True)
            raise ConfigError(f"could not convert {gguf}: {one_line(exc)}") from None
    meta = json.loads((cache_dir / "ctxleak_source.json").read_text())
    return cache_dir, meta.get("gguf_sha256")


def cache_ready(cache_dir: Path) -> bool:
    """Whether a converted cache folder is whole: its provenance file and a model.safetensors
    whose header matches its size (one damaged on disk is converted again, with a message)."""
    weights = cache_dir / "model.safetensors"
    if not weights.is_file() or not (cache_dir / "ctxleak_source.json").is_file():
        return False
    try:
        safetensors_header(weights)
    except ConfigError as exc:
        say(f"{exc}; converting again")
        return False
    return True


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (library messages run over several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__

