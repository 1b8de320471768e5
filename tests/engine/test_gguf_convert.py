"""A ``.gguf`` model is converted once into a safetensors cache folder and loads from it as
transformers reads the GGUF itself, on a tiny Llama GGUF (tests/helpers/tiny_gguf.py) instead of
the default model's: the folder's layout and provenance, the conversion done once, a damaged
cache converted again, and a named GGUF model served with its converted folder's tokenizer."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from helpers.fake_server import fake_vllm
from helpers.tiny_gguf import TOKENS, write_tiny_gguf
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from ctxleak.engine import catalogue
from ctxleak.engine.catalogue import CACHE_FORMAT, NamedModel, gguf_cache_dir
from ctxleak.engine.convert import hf_state_dict
from ctxleak.engine.models import load_model
from ctxleak.engine.served import serve, tokenizer_source
from ctxleak.errors import ConfigError

TEXT = "the theta thread"


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    return write_tiny_gguf(tmp_path / "tiny.gguf")


def _logits(lm, text=TEXT):
    ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return lm.model(input_ids=ids).logits


def test_a_gguf_file_converts_once_to_the_model_transformers_reads(tiny_gguf, capsys):
    lm = load_model(str(tiny_gguf), device="cpu")
    assert "converting tiny.gguf to a safetensors cache" in capsys.readouterr().err
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    folder, _ = gguf_cache_dir(tiny_gguf)
    assert (lm.info.source, lm.info.path, lm.info.file_sha256) == ("gguf", str(folder), sha)
    assert json.loads((folder / "ctxleak_source.json").read_text()) == {
        "gguf": str(tiny_gguf.resolve()), "gguf_sha256": sha, "cache_format": CACHE_FORMAT}
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert (folder / "generation_config.json").is_file()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:  # the tied head stored once
        assert "model.embed_tokens.weight" in f.keys() and "lm_head.weight" not in f.keys()
    assert not list(folder.parent.glob("*.tmp-*"))
    # transformers' own reading of the GGUF: the same tokens, the same logits
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent),
                                                     gguf_file=tiny_gguf.name).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    ids = lm.tokenizer(TEXT)["input_ids"]
    assert ids == tokenizer(TEXT)["input_ids"]
    # byte-level BPE by hand: "t h" is the first merge, so "h e" and "Ġt he" never apply here
    assert [TOKENS[i] for i in ids] == ["th", "e", "Ġ", "th", "e", "t", "a",
                                        "Ġ", "th", "r", "e", "a", "d"]
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids])).logits
    assert torch.equal(_logits(lm), expected)
    again = load_model(str(tiny_gguf), device="cpu")  # from the cache: no conversion
    assert "converting" not in capsys.readouterr().err
    assert again.info.path == str(folder) and torch.equal(_logits(again), expected)


def test_a_damaged_cache_is_converted_again(tiny_gguf, capsys):
    first = _logits(load_model(str(tiny_gguf), device="cpu"))
    folder, _ = gguf_cache_dir(tiny_gguf)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # cut short
    capsys.readouterr()
    lm = load_model(str(tiny_gguf), device="cpu")
    err = capsys.readouterr().err
    assert "converting again" in err and "converting tiny.gguf" in err
    assert torch.equal(_logits(lm), first)


def test_a_named_gguf_model_is_served_with_its_converted_tokenizer(tiny_gguf, monkeypatch):
    """``serve("NAME")`` of a named model that is a GGUF file: the local tokenizer is the one of
    the converted folder the server is started on."""
    monkeypatch.setitem(catalogue.NAMED_MODELS, "tiny-gguf", NamedModel(
        "tiny-gguf", "a tiny GGUF", "write it", lambda: tiny_gguf))
    folder = str(gguf_cache_dir(tiny_gguf)[0])
    assert tokenizer_source("tiny-gguf", None) == folder  # converted on the way
    assert tokenizer_source("tiny-gguf", "other/tokenizer") == "other/tokenizer"
    assert tokenizer_source("org/model", None) == "org/model"
    here = load_model("tiny-gguf", device="cpu")
    with fake_vllm(here, served_name="tiny-gguf") as up:
        there = serve("tiny-gguf", up.url, api="vllm", check=False)
    assert there.info.tokenizer == folder and there.info.name == "tiny-gguf"
    assert there.encode(TEXT) == here.encode(TEXT) and there.eos_ids == here.eos_ids == [1]


def test_a_tied_head_listed_before_its_embedding_is_stored_under_the_embeddings_name():
    """Where the output head comes first in the state dict, the tensor is still kept once,
    under the input embedding's name."""
    class HeadFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.embed = torch.nn.Embedding(5, 3)
            self.head.weight = self.embed.weight
            self.norm = torch.nn.LayerNorm(3)

        def get_input_embeddings(self):
            return self.embed

    model = HeadFirst()
    assert list(model.state_dict())[:2] == ["head.weight", "embed.weight"]
    out = hf_state_dict(model)
    assert list(out) == ["embed.weight", "norm.weight", "norm.bias"]
    assert torch.equal(out["embed.weight"], model.embed.weight.detach())


def test_a_conversion_that_fails_leaves_no_folder_and_no_lock(tiny_gguf, monkeypatch):
    """Writing the weights fails (a full disk): one ConfigError naming the file, and neither
    the half-written folder nor the lock file stays in the cache."""
    from ctxleak.engine import convert

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert, "save_file", full_disk)
    with pytest.raises(ConfigError, match=f"could not convert {tiny_gguf}: .*No space left"):
        load_model(str(tiny_gguf), device="cpu")
    converted = gguf_cache_dir(tiny_gguf)[0].parent
    assert list(converted.iterdir()) == []
