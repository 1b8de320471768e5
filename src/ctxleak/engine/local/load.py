"""Loading a model in this process: named models, Hugging Face ids, local folders and
``.gguf`` files (converted once into a cache folder, :mod:`ctxleak.engine.convert`), with one
line of error for every way a load fails (a device this torch lacks, a broken folder or file, a
Hub id not cached while offline, an unknown ``from_pretrained`` keyword)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants, try_to_load_from_cache
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxleak.engine.catalogue import DEFAULT_MODEL, cache_root, resolve_source
from ctxleak.engine.convert import converted, one_line
from ctxleak.engine.lm import ModelInfo, bos_convention, eos_convention
from ctxleak.engine.loading import hub_endpoint, hub_reachable, quiet_loading, unreachable_error
from ctxleak.engine.local.devices import resolve_device, resolve_dtype
from ctxleak.engine.local.model import LM
from ctxleak.engine.model_args import parse_model_args
from ctxleak.engine.model_files import check_model_dir, fingerprint
from ctxleak.errors import ConfigError


def load_local(name_or_path: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               chat_template: str = "auto", trust_remote_code: bool = False,
               revision: str | None = None, device_map: str | None = None,
               model_args: str | Mapping[str, Any] | None = None) -> LM:
    """A causal LM and its tokenizer loaded in this process (the arguments are
    :func:`ctxleak.engine.models.load_model`'s)."""
    if chat_template not in ("auto", "on", "off"):
        raise ConfigError(f"unknown chat_template '{chat_template}': use auto, on or off",
                          param="chat_template")
    extra = parse_model_args(model_args)
    display, source, path, _ = resolve_source(name_or_path)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    file_sha = None
    if source == "gguf":
        assert path is not None
        cache_dir, file_sha = converted(path)
        load_from = str(cache_dir)
    elif source == "local":
        assert path is not None
        check_model_dir(path, trust_remote_code=trust_remote_code)
        load_from = str(path)
    else:
        _check_hub_offline(name_or_path, revision)
        load_from = name_or_path
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if source == "hub" and revision:
        kwargs["revision"] = revision
    if source == "hub" and not _hub_offline() and _cached_only(name_or_path, revision):
        kwargs["local_files_only"] = True  # the Hub is unreachable: no minute of retries
    tokenizer, model = _from_pretrained(name_or_path, load_from, kwargs, torch_dtype, device_map,
                                        extra)
    if not device_map:
        _place(model, dev, torch_dtype)
    else:
        dev = str(model.get_input_embeddings().weight.device)
    model.eval()
    rev = revision
    if source == "hub":
        rev = getattr(model.config, "_commit_hash", None) or _cached_commit(
            name_or_path, revision) or revision
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ConfigError(f"chat_template='on', but model '{display}' has no chat template",
                          param="chat_template")
    use_template = has_template if chat_template == "auto" else chat_template == "on"
    info = ModelInfo(name=display, source=source, path=load_from, revision=rev,
                     file_sha256=file_sha, dtype=str(torch_dtype).replace("torch.", ""),
                     device=dev, chat_template=use_template,
                     files_sha256=files_fingerprint(name_or_path), model_args=extra or None)
    return LM(model=model, tokenizer=tokenizer, info=info, use_chat_template=use_template,
              bos_ids=bos_convention(tokenizer), eos_ids=eos_ids(tokenizer, model))


def files_fingerprint(name_or_path: str) -> dict[str, str] | None:
    """``{file name: SHA-256}`` of the files a model is loaded from (a ``.gguf`` file, or a
    model folder's weights, configs and tokenizer; see :mod:`ctxleak.engine.model_files`).
    None for a Hugging Face id (its revision is recorded at load) or a name that does not
    resolve (:func:`load_local` reports that)."""
    try:
        _, _, path, _ = resolve_source(name_or_path)
    except ConfigError:
        return None
    if path is None:
        return None
    try:
        return fingerprint(path, cache_root() / "sha256")
    except OSError:
        return None


def _cached_commit(model_id: str, revision: str | None) -> str | None:
    """The commit a Hub model's files were loaded from: the snapshot folder of its cached
    config.json (transformers 5 no longer keeps it in the config as ``_commit_hash``; the id
    is a valid one: the model was loaded by it)."""
    cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
    return Path(cached).parent.name if isinstance(cached, str) else None


def _hub_offline() -> bool:
    """Whether the Hugging Face Hub may not be contacted (``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE``, as set now or when huggingface_hub was imported)."""
    now = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "")
    return bool(constants.HF_HUB_OFFLINE) or now.strip().upper() in ("1", "ON", "YES", "TRUE")


def _check_hub_offline(model_id: str, revision: str | None) -> None:
    """Offline, a Hub id must already be in the local Hugging Face cache: say so at once
    instead of transformers' several-line connection error."""
    if not _hub_offline():
        return

    try:
        cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        cached = None
    if not isinstance(cached, str):
        raise ConfigError(f"model '{model_id}' is not in the Hugging Face cache "
                          f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set: download it "
                          "once with network, or give a local model folder")


def _cached_only(model_id: str, revision: str | None) -> bool:
    """Online: whether the Hub is unreachable, so a cached ``model_id`` must load from the cache
    alone; not cached, that is a ConfigError at once (:mod:`ctxleak.engine.loading`)."""
    endpoint = hub_endpoint()
    if hub_reachable(endpoint):
        return False
    try:
        cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        cached = None
    if not isinstance(cached, str):
        raise unreachable_error(model_id, endpoint)
    return True


def _from_pretrained(name_or_path: str, load_from: str, kwargs: dict[str, Any], torch_dtype: torch.dtype,
                     device_map: str | None, extra: dict[str, Any] | None = None
                     ) -> tuple[Any, Any]:
    """transformers' tokenizer and model from ``load_from`` (``extra``: more keywords of the
    model's ``from_pretrained``), without its progress bars; its many failure types (a corrupt
    file, an unknown architecture, a missing tokenizer, no network, an unknown ``extra``
    keyword) become one line."""
    model_kwargs = dict(kwargs, **({"device_map": device_map} if device_map else {}),
                        **(extra or {}))
    part = "tokenizer"
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(load_from, **kwargs)
            part = "weights"
            model = AutoModelForCausalLM.from_pretrained(load_from, dtype=torch_dtype,
                                                         **model_kwargs)
    except TypeError as exc:  # an unknown --model-args keyword reaches the model's __init__
        if not extra:
            raise
        raise ConfigError(f"could not load model '{name_or_path}' with model_args "
                          f"{extra}: {one_line(exc)}", param="model_args") from None
    except (OSError, ValueError, KeyError, ImportError, RuntimeError, SafetensorError) as exc:
        raise ConfigError(f"could not load the {part} of model '{name_or_path}': "
                          f"{one_line(exc)}") from None
    return tokenizer, model


def _place(model: Any, device: str, torch_dtype: torch.dtype) -> None:
    """Move ``model`` to ``device``; a dtype the device cannot hold is a ConfigError."""
    try:
        model.to(device)
    except (RuntimeError, TypeError) as exc:
        dtype = str(torch_dtype).replace("torch.", "")
        raise ConfigError(f"could not put the model on {device} in dtype='{dtype}': "
                          f"{one_line(exc)}; try dtype='float32'", param="dtype") from None


def eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """All ids that end a response: the tokenizer's EOS and the generation config's."""
    return eos_convention(tokenizer, getattr(model, "generation_config", None))


def from_objects(model: Any, tokenizer: Any, name: str = "in-memory", chat_template: bool = False) -> LM:
    """Wrap an already built model and tokenizer (tests, notebooks) as an :class:`LM`."""
    model.eval()
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    info = ModelInfo(name=name, source="in-memory", path="", dtype=dtype,
                     device=str(next(model.parameters()).device), chat_template=chat_template)
    return LM(model=model, tokenizer=tokenizer, info=info, use_chat_template=chat_template,
              bos_ids=bos_convention(tokenizer), eos_ids=eos_ids(tokenizer, model))
