"""A tiny Llama that repeats the digits of its prompt, its weights set by hand: the model a
canary audit needs where no real model can run (the conformance checks of
:mod:`ctxleak.testing`, and ctxleak's fast tests). Random tiny models cannot leak a canary:
their word vocabulary has no digits (an account number is one unknown token, the same for every
canary) and random weights copy nothing from their context.

One layer whose attention scores are all 0 (query and key weights 0), so each position reads the
mean of the prompt's one-hot embeddings up to it; the MLP is 0; the output head scores only the
digits, each by its share of the prompt: a digit the prompt holds is likely next, in proportion
to how often it occurs, and one it does not hold is as likely as any other word. The token just
read counts against itself (its embedding is negated in the residual stream), so the most likely
continuation alternates between the two digits the prompt holds most, rather than repeating one.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ctxleak.engine.models import from_objects

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
DIGITS = list("0123456789")
#: The words of ctxleak's template and the canary's sentence and question; others are <unk>.
WORDS = ("Document : . Account number What is the account ? Answer with digits only Customer "
         "file Billing record").split()


def digit_tokenizer() -> PreTrainedTokenizerFast:
    """Words and punctuation split apart, every digit a token of its own."""
    vocab = {t: i for i, t in enumerate(SPECIAL + DIGITS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def digit_copier(mix: float = 4.0, digit_weight: float = 2.0):
    """The model (module docstring): ``mix`` weighs the prompt's mean against the token read,
    ``digit_weight`` how sharply a digit of the prompt is preferred."""
    tok = digit_tokenizer()
    size = len(tok)
    config = LlamaConfig(vocab_size=size, hidden_size=size, intermediate_size=4,
                         num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                         head_dim=size, max_position_embeddings=256, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    eye = torch.eye(size)
    digits = torch.zeros(size)
    digits[len(SPECIAL):len(SPECIAL) + len(DIGITS)] = digit_weight
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        layer = model.model.layers[0]
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        model.model.embed_tokens.weight.copy_(-eye)  # the token read counts against itself
        layer.self_attn.v_proj.weight.copy_(-eye)  # ... and for itself in the prompt's mean
        layer.self_attn.o_proj.weight.copy_(mix * eye)
        model.lm_head.weight.copy_(torch.diag(digits))
    return from_objects(model, tok, name="digit-copier")
