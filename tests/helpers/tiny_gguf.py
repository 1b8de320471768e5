"""A tiny Llama written as a GGUF file (float32 tensors, a byte-level BPE tokenizer of 34 tokens
with four merges, tied embedding), which transformers loads as it loads the default model's
GGUF: the fast tier's road through the conversion to a safetensors cache folder."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

TOKENS = ["<s>", "</s>", "<unk>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", "th", "Ġt", "he", "Ġthe"]
MERGES = ["t h", "Ġ t", "h e", "Ġt he"]
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 16, 2, 2, 1, 32
#: transformers' parameter name -> the GGUF tensor name (of each layer: ``{i}``)
NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         **{f"model.layers.{{i}}.{a}.weight": f"blk.{{i}}.{b}.weight" for a, b in [
             ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
             ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
             ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
             ("mlp.down_proj", "ffn_down"), ("input_layernorm", "attn_norm"),
             ("post_attention_layernorm", "ffn_norm")]}}


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A random tiny Llama (``seed``) as the GGUF file ``path``."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(TOKENS), hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, tie_word_embeddings=True)
    weights = {k: v.detach().numpy().astype(np.float32)
               for k, v in LlamaForCausalLM(config).state_dict().items()}
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(TOKENS))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(TOKENS)
    writer.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))  # control, then normal
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(2)
    for ours, theirs in NAMES.items():
        for i in range(LAYERS) if "{i}" in ours else [0]:
            writer.add_tensor(theirs.format(i=i), weights[ours.format(i=i)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
