"""Connecting to a served model: :func:`serve` reads what the server says of its model, loads
the local tokenizer and returns the model as its wire dialect's :class:`ServedLM`.

The tokenizer stays local (a Hugging Face id or folder; for ``default`` the converted cache
folder the server is started on). Before a run, :meth:`ServedLM.check_server` asks the server
to tokenize a probe text (where the dialect can) and refuses log-probs that are impossible
(positive, not finite) or uniform (a model folder the server read wrongly).
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, GenerationConfig

from ctxleak.engine.catalogue import NAMED_MODELS, resolve_source
from ctxleak.engine.convert import converted
from ctxleak.engine.lm import bos_convention, eos_convention
from ctxleak.engine.served.base import ServedInfo, ServedLM
from ctxleak.engine.served.openai import OpenAIServedLM
from ctxleak.engine.served.vllm import VLLMServedLM
from ctxleak.engine.served_client import (
    ClientOptions,
    ServedClient,
    ServerError,
    api_key_from_env,
)
from ctxleak.engine.served_options import (
    check_request_timeout,
    check_retries,
    check_server_url,
    normal_server_url,
)
from ctxleak.errors import ConfigError

#: Wire dialect name (``serve(api=...)``) -> its class. A new serving engine: one module with
#: a :class:`ServedLM` subclass, and one entry here.
DIALECTS: dict[str, type[ServedLM]] = {cls.api: cls for cls in (VLLMServedLM, OpenAIServedLM)}
#: ``api="auto"`` tries the first and falls back to the second.
AUTO_FIRST: type[ServedLM] = VLLMServedLM
AUTO_FALLBACK: type[ServedLM] = OpenAIServedLM


def tokenizer_source(model: str, tokenizer: str | None) -> str:
    """Where the local tokenizer is read from: ``tokenizer`` if given, else ``model``'s folder
    (a named model's converted cache folder, the one its server is started on)."""
    if tokenizer:
        return tokenizer
    if model in NAMED_MODELS:
        _, source, path, _ = resolve_source(model)
        if source == "gguf" and path is not None:
            return str(converted(path)[0])
    return model


def _eos_ids(tokenizer: Any, folder: str) -> list[int]:
    """The tokenizer's EOS and those of the folder's ``generation_config.json``, if it has one."""
    has_config = Path(folder, "generation_config.json").is_file()
    return eos_convention(tokenizer, GenerationConfig.from_pretrained(folder) if has_config else None)


def _server_facts(client: ServedClient, served_model: str | None) -> tuple[str, dict[str, Any]]:
    """The served model's id (``served_model``, or the server's only one) and what the server
    says about it: ``/v1/models``'s entry (id, max_model_len, root, owned_by; not its
    ``created``, the time of asking) and ``/version``."""
    listing = client.get("/v1/models")
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise ServerError(f"the server at {client.url} (/v1/models) answered "
                          f"{_shown(listing)}, not an object with a 'data' list of models: is it "
                          "an OpenAI-compatible server?")
    models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if len(models) != len(data):
        raise ServerError(f"the server at {client.url} (/v1/models) answered a model entry "
                          f"without a string 'id': {_shown(data)}")
    ids = [str(m["id"]) for m in models]
    if not ids:
        raise ServerError(f"the server at {client.url} (/v1/models) serves no model: is it still "
                          "loading one?")
    if served_model is None:
        if len(ids) != 1:
            raise ConfigError(f"the server at {client.url} serves {len(ids)} models ({ids}): "
                              "name one with served_model", param="served_model")
        served_model = ids[0]
    if served_model not in ids:
        raise ConfigError(f"the server at {client.url} does not serve '{served_model}' (it "
                          f"serves {ids})", param="served_model")
    entry = models[ids.index(served_model)]
    facts = {k: entry[k] for k in ("id", "max_model_len", "root", "owned_by")
             if k in entry}
    with suppress(ServerError):
        version = client.get("/version")
        if isinstance(version, dict) and "version" in version:
            facts["version"] = version["version"]
    return served_model, facts


def _shown(value: Any, limit: int = 120) -> str:
    """A server's answer as JSON, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


def client_options(options: ClientOptions | None, request_timeout: float | None = None,
                   retries: int | None = None) -> ClientOptions:
    """``options`` (default: :class:`ClientOptions`'s) with the user's ``request_timeout``
    (seconds) and ``retries`` (times sent again: ``retries + 1`` attempts in all), each checked
    and naming its parameter when it is wrong."""
    options = options or ClientOptions()
    timeout = check_request_timeout(request_timeout)
    again = check_retries(retries)
    if timeout is not None:
        options = replace(options, timeout=timeout)
    if again is not None:
        options = replace(options, attempts=again + 1)
    return options


def serve(model: str = "default", server_url: str = "http://127.0.0.1:8000", *,
          served_model: str | None = None, tokenizer: str | None = None,
          chat_template: str = "auto", api: str = "auto", api_key_env: str | None = None,
          options: ClientOptions | None = None, request_timeout: float | None = None,
          retries: int | None = None, check: bool = True,
          env_fallback: bool = True) -> ServedLM:
    """A model served at ``server_url`` (an OpenAI-compatible API; vLLM for exact scoring) as
    an LM every method that needs only log-probs and samples accepts.

    ``model``: the name ctxleak knows it by (``default``, a Hugging Face id or folder), which
    also gives the local tokenizer unless ``tokenizer`` names one. ``served_model``: the name
    the server serves it under (default: the server's only model). ``api``: ``vllm`` (token-id
    prompts with ``prompt_logprobs``), ``openai-echo`` (``echo`` + ``logprobs``) or ``auto``
    (vLLM when the server answers ``prompt_logprobs``). The API key, if any, is read from the
    environment (``api_key_env``, else CTXLEAK_API_KEY or OPENAI_API_KEY unless
    ``env_fallback`` is False: a proxy sends its upstream only the key named for it) and never
    stored.
    ``check``: the tokenizer and log-prob checks of :meth:`ServedLM.check_server`.
    ``request_timeout``: seconds one request may take (the whole answer; default 600);
    ``retries``: times a request that failed for a transient reason (a refused connection, a
    timeout, HTTP 429 or 5xx) is sent again (default 3; 0: tried once). Both override
    ``options`` and change no measured number.
    """
    if chat_template not in ("auto", "on", "off"):
        raise ConfigError(f"unknown chat_template '{chat_template}': use auto, on or off",
                          param="chat_template")
    if api != "auto" and api not in DIALECTS:
        raise ConfigError(f"unknown api '{api}': use auto or one of {', '.join(DIALECTS)}",
                          param="api")
    check_server_url(server_url)  # host, port and scheme (in any case), shown as given
    server_url = normal_server_url(server_url)
    options = client_options(options, request_timeout, retries)
    key = api_key_from_env(api_key_env) if api_key_env or env_fallback else None
    client = ServedClient(server_url, api_key=key, options=options)
    served_model, facts = _server_facts(client, served_model)
    source = tokenizer_source(model, tokenizer)
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"could not load the tokenizer '{source}' of the served model: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                          "give tokenizer=HF id or folder", param="tokenizer") from None
    has_template = bool(getattr(tok, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ConfigError(f"chat_template='on', but the tokenizer '{source}' has no chat "
                          "template", param="chat_template")
    use_template = has_template if chat_template == "auto" else chat_template == "on"
    max_len = facts.get("max_model_len")
    chosen = DIALECTS[api] if api != "auto" else AUTO_FIRST
    info = ServedInfo(name=model, served_model=served_model, base_url=client.url,
                      tokenizer=source, api=chosen.api, server=facts, path=source,
                      chat_template=use_template)
    lm: ServedLM = chosen(client=client, tokenizer=tok, info=info,
                          use_chat_template=use_template, bos_ids=bos_convention(tok),
                          eos_ids=_eos_ids(tok, source),
                          max_model_len=int(max_len) if max_len else None)
    if api == "auto":
        lm = _detect_dialect(lm)
    if check:
        lm.check_server()
    return lm


def _detect_dialect(lm: ServedLM) -> ServedLM:
    """The vLLM dialect when the server answers its ``prompt_logprobs``, else (no such answer,
    or HTTP 400: a server that refuses fields it does not know) the plain echo form: the same
    model, as the dialect's class."""
    seq = list(lm.bos_ids) + lm.encode("Hello world") if lm.bos_ids else lm.encode("Hello world")
    try:
        answer = lm.client.post("/v1/completions", AUTO_FIRST._score_body(lm, [seq]))
    except ServerError as exc:
        if exc.status != 400:
            raise
        answer = {}
    choice = (answer.get("choices") or [{}])[0]
    cls = AUTO_FIRST if isinstance(choice.get("prompt_logprobs"), list) else AUTO_FALLBACK
    if type(lm) is cls:
        return lm
    return cls(client=lm.client, tokenizer=lm.tokenizer,
               info=ServedInfo(**{**lm.info.to_dict(), "api": cls.api}),
               use_chat_template=lm.use_chat_template, bos_ids=lm.bos_ids, eos_ids=lm.eos_ids,
               max_model_len=lm.max_model_len)


def describe_server(lm: ServedLM) -> str:
    """One line for the console: what is served where."""
    facts = json.dumps({k: v for k, v in lm.info.server.items() if k != "created"})
    return f"served model '{lm.info.served_model}' at {lm.info.base_url} {facts}"
