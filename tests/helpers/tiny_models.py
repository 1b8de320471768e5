"""Tiny random causal LMs and a word-level tokenizer, built entirely in-process."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from ctxleak.engine.models import from_objects

WORDS = ("the a of to and is in it was for on that with as by at from capital city country "
         "paris france rome italy berlin germany madrid spain news report said doctor patient "
         "email phone address name document answer question summary yes no one two three four "
         ". , : ? !").split() + ["\n"]
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]


def word_tokenizer(add_bos: bool) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL + [w for w in WORDS if w])}
    vocab.setdefault("\n", len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit()])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    if add_bos:
        from tokenizers import processors

        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def tiny_llama(seed: int = 0, vocab_extra: int = 7, width: int = 32):
    """``width``: the hidden size (the MLP twice that); 32 keeps the tests fast, a wider one
    makes float32 matrix products depend on their row count, as real models' do."""
    torch.manual_seed(seed)
    tok = word_tokenizer(add_bos=True)
    config = LlamaConfig(vocab_size=len(tok) + vocab_extra, hidden_size=width,
                         intermediate_size=2 * width,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    _sharpen(model)
    return from_objects(model, tok, name="tiny-llama")


def tiny_gpt2(seed: int = 1):
    torch.manual_seed(seed)
    tok = word_tokenizer(add_bos=False)
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=256,
                        bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(config)
    _sharpen(model)
    return from_objects(model, tok, name="tiny-gpt2")


def tiny_gemma3(sliding_window: int = 4, seed: int = 2):
    """Gemma-3-like: one sliding-window layer (``sliding_window`` tokens), one full layer."""
    torch.manual_seed(seed)
    tok = word_tokenizer(add_bos=True)
    config = Gemma3TextConfig(vocab_size=len(tok) + 7, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=8, max_position_embeddings=256,
                              sliding_window=sliding_window,
                              layer_types=["sliding_attention", "full_attention"],
                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = Gemma3ForCausalLM(config).eval()
    _sharpen(model)
    return from_objects(model, tok, name="tiny-gemma3")


def _sharpen(model) -> None:
    """Scale the output head so the random model's distributions are far from uniform."""
    with torch.no_grad():
        head = model.get_output_embeddings()
        if head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            head.weight.mul_(8.0)
