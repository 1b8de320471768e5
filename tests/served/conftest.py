"""Fixtures for the tests against a real vLLM server (tests/helpers/vllm_server.py): one server on
the default model for the whole session, started on first use and stopped by its process group at
the end. Where vLLM is unavailable (not x86-64 Linux, or no server virtualenv) these tests skip
and say why."""

from __future__ import annotations

import pytest
from helpers.vllm_server import VLLMServer, start_server, vllm_python


@pytest.fixture(scope="session")
def vllm_py():
    python, why = vllm_python()
    if python is None:
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def default_dir(default_lm) -> str:
    """The default model's converted Hugging Face folder (config.json with ``architectures``,
    the tied embedding under ``model.embed_tokens.weight``, the tokenizer): what vLLM serves."""
    return str(default_lm.info.path)


@pytest.fixture(scope="session")
def vllm_server(vllm_py, default_dir) -> VLLMServer:
    server = start_server(default_dir, vllm_py)
    yield server
    server.stop()
