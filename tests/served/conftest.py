"""Fixtures for the tests against a real vLLM server (tests/helpers/vllm_server.py): one server on
the default model for the whole session, started on first use and stopped by its process group at
the end. Where vLLM is unavailable (not x86-64 Linux, or no server virtualenv) these tests skip
and say why, or fail where ``CTXLEAK_REQUIRE_VLLM=1`` (CI)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers.fake_server import plausible
from helpers.tiny_models import tiny_llama
from helpers.vllm_server import (
    SERVED_NAME,
    VLLMServer,
    external_server,
    required_vllm_python,
    start_server,
)

from ctxleak.engine.served import PROBE_TEXT


@pytest.fixture(scope="module")
def tiny():
    """The fake server's model (tests/helpers/fake_server.py): a tiny Llama (vocabulary =
    tokenizer, as a served model's) fitted to the probe text, so that the check before a run
    accepts it as a real model would be accepted."""
    return plausible(tiny_llama(seed=3, vocab_extra=0), PROBE_TEXT)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory, tiny):
    """The tiny model's tokenizer saved to a folder (what ``serve(tokenizer=...)`` reads)."""
    path = tmp_path_factory.mktemp("served-tok")
    tiny.tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def vllm_py():
    return required_vllm_python()


@pytest.fixture(scope="session")
def default_dir(default_lm) -> str:
    """The default model's converted Hugging Face folder (config.json with ``architectures``,
    the tied embedding under ``model.embed_tokens.weight``, the tokenizer): what vLLM serves."""
    return str(default_lm.info.path)


@pytest.fixture(scope="session")
def vllm_server(vllm_py, default_dir) -> Iterator[VLLMServer]:
    """The session's server. ``CTXLEAK_VLLM_URL`` (and ``CTXLEAK_VLLM_SERVED_NAME``) name one
    already running on the default model instead, started with the same flags."""
    if os.environ.get("CTXLEAK_VLLM_URL"):
        yield external_server(os.environ["CTXLEAK_VLLM_URL"],
                              os.environ.get("CTXLEAK_VLLM_SERVED_NAME", SERVED_NAME))
        return
    server = start_server(default_dir, vllm_py)
    yield server
    server.stop()
