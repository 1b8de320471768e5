"""A tiny random Llama whose tokenizer is a byte-pair encoder trained in-process on a few texts,
with no pre-tokenizer: its merges run across spaces, line breaks and the edges of the documents
in a prompt ("old.\\n\\n"), as real tokenizers' merges sometimes do."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch
from tokenizers import Tokenizer, models, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ctxleak.engine.models import from_objects


def bpe_tokenizer(texts: Sequence[str], chat_template: str, vocab_size: int = 60,
                  alphabet: str = "") -> PreTrainedTokenizerFast:
    """A byte-pair tokenizer trained on ``texts`` (repeated), with ``chat_template``;
    ``alphabet``: characters it must know beyond those of ``texts``."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=sorted(set(alphabet)),
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(list(texts) * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = chat_template
    return fast


def as_model(tokenizer: Any) -> SimpleNamespace:
    """Just what prompt rendering reads of a model: its tokenizer and name."""
    return SimpleNamespace(tokenizer=tokenizer, info=SimpleNamespace(name="bpe"))


def tiny_bpe_llama(texts: Sequence[str], chat_template: str, seed: int = 3, **kw: Any):
    """A tiny random Llama over :func:`bpe_tokenizer`'s vocabulary, its output head scaled so
    its distributions are far from uniform."""
    tok = bpe_tokenizer(texts, chat_template, **kw)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return from_objects(model, tok, name="tiny-bpe-llama")
