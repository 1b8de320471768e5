"""Integration: the engine on the real default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from ctxleak.engine.generation import generate_streams
from ctxleak.engine.scoring import continuation_logprobs, next_token_logprobs
from ctxleak.engine.streams import single_stream

pytestmark = pytest.mark.integration


def test_load_score_generate(default_lm):
    lm = default_lm
    assert lm.info.name == "default" and lm.info.file_sha256 and lm.vocab_size == 49152
    prompt = lm.encode("The capital of France is")
    logp = next_token_logprobs(lm, [prompt])[0]
    assert lm.decode([int(logp.argmax())]).strip() == "Paris"
    assert float(torch.logsumexp(logp, 0)) == pytest.approx(0.0, abs=1e-9)
    out = generate_streams(lm, [prompt], single_stream(0.8), max_new_tokens=6, seed=1)
    again = generate_streams(lm, [prompt], single_stream(0.8), max_new_tokens=6, seed=1,
                             use_cache=False)
    assert out.token_ids == again.token_ids and len(out.token_ids) > 0


def test_batch_size_invariance(default_lm):
    lm = default_lm
    prompts = [lm.encode(t) for t in ("Hello there", "The quick brown fox jumps over the lazy",
                                      "A", "Privacy matters because")]
    cont = lm.encode(" and then it ended.")
    a = continuation_logprobs(lm, prompts, cont, batch_size=1, reuse_prefix=False)
    b = continuation_logprobs(lm, prompts, cont, batch_size=4, reuse_prefix=False)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-4)


def test_converted_cache_is_the_hugging_face_layout(default_lm):
    """The GGUF -> safetensors cache had no ``architectures`` and held the tied embedding only
    as lm_head.weight, so vLLM left the input embeddings at zero and served the uniform
    distribution. Now: a plain reader sees model.embed_tokens.weight (and no lm_head), the
    config names the architecture, the tokenizer and generation config are there, and a fresh
    AutoModelForCausalLM.from_pretrained of the folder gives ctxleak's logits exactly."""
    folder = Path(default_lm.info.path)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"]
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [49152, 576]
        assert f.metadata() == {"format": "pt"}
    assert "lm_head.weight" not in keys and len(keys) == 272
    fresh = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = torch.tensor([default_lm.encode("The capital of France is Paris.")])
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, default_lm.model(ids).logits)
    # provenance: the GGUF's SHA-256, the file resume checks
    assert default_lm.info.files_sha256 == {"SmolLM2-135M-Instruct.Q4_1.gguf":
                                            default_lm.info.file_sha256}
