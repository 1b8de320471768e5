"""``cid_generate``: Context Influence Decoding (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.4; bounded CID: App. B, Alg. 1) through ``model.generate`` in
one call, with ctxleak's exact-ids prompts and the per-token ledger of
:class:`~ctxleak.integrations.transformers.ContextInfluenceProcessor`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ctxleak.engine.forward import left_pad, pad_id
from ctxleak.engine.lm import InProcessLM
from ctxleak.engine.models import LM, from_objects, load_model
from ctxleak.engine.prompts import template_fields
from ctxleak.errors import ConfigError, warn
from ctxleak.integrations.ledger import ledger_result
from ctxleak.integrations.renamed import cid_config, lam_renamed
from ctxleak.integrations.transformers import ContextInfluenceProcessor, number_param
from ctxleak.mitigations.ledger import RowLedger, to_records
from ctxleak.mitigations.prompts import TASK_TEMPLATES, PromptParts, document_parts
from ctxleak.results import InfluenceResult

# generate() settings the processor cannot follow: their steps do not extend one sequence by
# one drawn token (assisted decoding checks several candidate tokens at once; group, constrained
# and contrastive search and DoLa are decoding loops of their own).
UNSUPPORTED = {
    "assistant_model": "assisted decoding", "prompt_lookup_num_tokens": "prompt-lookup decoding",
    "assistant_early_exit": "self-speculative decoding", "penalty_alpha": "contrastive search",
    "num_beam_groups": "group beam search", "diversity_penalty": "group beam search",
    "constraints": "constrained beam search", "force_words_ids": "constrained beam search",
    "dola_layers": "DoLa decoding", "custom_generate": "a custom generation loop",
}
# generate() settings under which the sampled distribution is not p̄_λ at temperature T (paper
# 000 §3 samples at temperature only; App. B's ε-DP bound needs it), with their neutral value.
# Warpers run after the processor, on p̄_λ; masks forbid tokens before it (then forbidden in both
# streams); penalties rescale the context stream's logits before it, but not the no-context one's.
WARPERS = {"top_k": 0, "top_p": 1.0, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0,
           "eta_cutoff": 0.0, "top_h": None}
MASKS = {"no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None,
         "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None,
         "forced_eos_token_id": None}
PENALTIES = {"repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "sequence_bias": None,
             "exponential_decay_length_penalty": None, "guidance_scale": None,
             "watermarking_config": None}
NEUTRAL = {**WARPERS, **MASKS, **PENALTIES}


@dataclass(frozen=True)
class CIDGeneration:
    """What :func:`cid_generate` returns: ``generate``'s sequences, each row's new token ids
    (up to its EOS) and text, and its ledger."""

    sequences: torch.Tensor
    prompt_length: int
    response_ids: list[list[int]]
    texts: list[str]
    ledger: tuple[RowLedger, ...]

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per row: its ledger record (``samples.jsonl`` keys) and ``response``."""
        return to_records(self.ledger, self.texts)

    def to_result(self, *, seed: int = 0) -> InfluenceResult:
        """The ledger and texts as an :class:`~ctxleak.results.InfluenceResult` (``show``,
        ``to_pandas``, ``save``, ``to_html``; see :func:`~ctxleak.integrations.ledger.ledger_result`)."""
        return ledger_result(self.ledger, self.texts, seed=seed)


def _texts(value: Any, name: str) -> list[str]:
    """One string or a list of strings (one per prompt), or a :class:`ConfigError` naming
    ``name`` and the types accepted."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name} must be a string or a list of strings (one per prompt), not "
                          f"{type(value).__name__}", param=name)
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise ConfigError(f"{name} must be a string or a list of strings (one per prompt): "
                              f"item {i} is {type(text).__name__}", param=name)
    return list(value)


def _is_neutral(key: str, value: Any) -> bool:
    """Whether ``generate`` leaves the distribution alone with ``key=value`` (as its own
    ``_get_logits_processor`` decides which processors to build)."""
    if value is None or value == NEUTRAL[key] or (isinstance(value, (list, tuple, dict))
                                                  and not value):
        return True
    if key in ("top_p", "typical_p"):
        return value >= 1.0
    if key in ("epsilon_cutoff", "eta_cutoff"):
        return not 0.0 < value < 1.0
    return (key == "min_p" and value == 0) or (key == "guidance_scale" and value == 1)


def _check_generate_kwargs(kwargs: dict[str, Any], bounded: bool) -> None:
    """Refuse the decoding modes the processor cannot follow, penalties (they would rescale one
    stream only) and, with ``bounded_eps``, anything but pure temperature sampling."""
    for key, mode in UNSUPPORTED.items():
        value = kwargs.get(key)
        if value is not None and not (key == "num_beam_groups" and value == 1):
            raise ConfigError(f"{key}: {mode} is not supported with Context Influence Decoding "
                              "(greedy, sampling and beam search are)", param=key)
    for key in PENALTIES:
        if not _is_neutral(key, kwargs.get(key)):
            raise ConfigError(f"{key}: generate applies it to the logits with the context only, "
                              "before the CID mixture, so the mixture would not be Context "
                              "Influence Decoding's; drop it", param=key)
    if bounded:
        changed = [k for k in {**WARPERS, **MASKS} if not _is_neutral(k, kwargs.get(k))]
        if not kwargs.get("do_sample", True) or kwargs.get("num_beams", 1) != 1 or changed:
            raise ConfigError(
                "bounded_eps: the ε-DP bound holds for pure temperature sampling from p̄_λ "
                "(App. B); drop do_sample=False, num_beams and "
                f"{', '.join(changed) or 'truncation (top_k, top_p, ...)'}", param="bounded_eps")


def _neutralise_model_config(model: Any, kwargs: dict[str, Any]) -> None:
    """Set in ``kwargs`` the neutral value of every truncation, mask and penalty that the
    model's own ``generation_config`` sets and ``kwargs`` does not (``generate`` would apply it:
    many instruction-tuned models ship top_p or repetition_penalty), and say so once."""
    config = getattr(model, "generation_config", None)
    sampling = bool(kwargs.get("do_sample", True))
    dropped = []
    for key in NEUTRAL:
        if key in kwargs or (key in WARPERS and not sampling):
            continue
        value = getattr(config, key, None)
        if not _is_neutral(key, value):
            kwargs[key] = NEUTRAL[key]
            dropped.append(f"{key}={value!r}")
    beams = getattr(config, "num_beams", None)
    if "num_beams" not in kwargs and beams not in (None, 1):
        kwargs["num_beams"] = 1
        dropped.append(f"num_beams={beams!r}")
    if sampling:
        kwargs.setdefault("top_k", 0)  # generate's own default is top_k=50
    if dropped:
        warn("cid_generate samples at temperature only (Context Influence Decoding); "
             f"ignored the model's generation_config settings {', '.join(dropped)}")


@lam_renamed("cid_generate()")
def cid_generate(model: Any, tokenizer: Any = None, *, context: str | Sequence[str],
                 query: str | Sequence[str] = "", lambda_: float = 1.0,
                 bounded_eps: float | None = None, template: str | None = None,
                 chat: bool | None = None, **generate_kwargs: Any) -> CIDGeneration:
    """Answer ``query`` from the private ``context`` by (bounded) CID with ``model.generate``.

    Both prompts are built by ctxleak's exact-ids rule (template pieces and slots tokenised
    separately; the no-context prompt keeps the template with an empty slot; default template
    ``Document: {context}. {query}``, Fig. 5-6), left-padded with an attention mask.
    ``model``: a transformers causal LM with its ``tokenizer``, a ctxleak LM, or a model name for
    :func:`ctxleak.load_model`. ``context`` and ``query``: one string or one per row. ``chat``:
    wrap the prompt in the model's chat template (default: when the tokenizer has one).
    ``lambda_`` ≥ 0: the context influence level λ (``lam`` before, deprecated).
    ``generate_kwargs`` go to ``generate``; the defaults are CID's: ``do_sample=True``,
    ``temperature=0.8``, ``max_new_tokens=50`` and pure temperature sampling (the ledger's
    temperature is ``temperature``, also with ``do_sample=False``): the truncation (top-k,
    top-p, min-p, ...), masks (no-repeat n-grams, bad words, ...) and penalties that the model's
    own ``generation_config`` sets are neutralised, with a warning naming them. Penalties passed
    here are refused (``generate`` would apply them to the context stream only), and with
    ``bounded_eps`` so is anything but temperature sampling (App. B).
    Bad arguments raise :class:`~ctxleak.errors.ConfigError` naming the parameter.
    """
    checked, kwargs = _checked(context, query, template, chat, lambda_, bounded_eps,
                               generate_kwargs)
    lm = _loaded(model, tokenizer, chat)  # every argument checked before the model loads
    _decoding_kwargs(lm, kwargs, checked.temperature)
    parts = _prompt_parts(lm, checked, int(kwargs["max_new_tokens"]))
    eos = kwargs["eos_token_id"]
    processor = ContextInfluenceProcessor(
        lm, [p.empty for p in parts], full_ids=[p.full for p in parts], lambda_=checked.lam,
        temperature=checked.temperature, bounded_eps=checked.bounded_eps,
        eos_token_id=eos if eos is not None else [])
    return _generated(lm, parts, processor, kwargs)


@dataclass(frozen=True)
class _Checked:
    """:func:`cid_generate`'s arguments checked: one context and query per row, the template,
    λ, ε (None: plain CID) and the temperature."""

    contexts: list[str]
    queries: list[str]
    template: str
    lam: float
    bounded_eps: float | None
    temperature: float


def _checked(context: str | Sequence[str], query: str | Sequence[str], template: str | None,
             chat: bool | None, lambda_: float, bounded_eps: float | None,
             generate_kwargs: dict[str, Any]) -> tuple[_Checked, dict[str, Any]]:
    """Every argument of :func:`cid_generate` but the model checked, in the order they are
    refused; and ``generate``'s keywords, a copy without ``temperature``."""
    contexts = _texts(context, "context")
    queries = [query] * len(contexts) if isinstance(query, str) else _texts(query, "query")
    if len(queries) != len(contexts) or not contexts:
        raise ConfigError(f"{len(contexts)} contexts and {len(queries)} queries: give one each",
                          param="query")
    for i, text in enumerate(contexts):
        if not text.strip():
            raise ConfigError(f"context {i} is empty: CID needs a context to decode against",
                              param="context")
    if template is not None and not isinstance(template, str):
        raise ConfigError(f"template must be a string with the slot {{context}}, not "
                          f"{type(template).__name__}", param="template")
    if chat is not None and not isinstance(chat, bool):
        raise ConfigError(f"chat must be True, False or None, not {chat!r}", param="chat")
    lam = number_param(lambda_, "lambda_")
    bounded_eps = None if bounded_eps is None else number_param(bounded_eps, "bounded_eps")
    tmpl = template or TASK_TEMPLATES["qa"]
    if "context" not in template_fields(tmpl):
        raise ConfigError("template must contain the slot {context}", param="template")
    kwargs = dict(generate_kwargs)
    _check_generate_kwargs(kwargs, bounded_eps is not None)
    temperature = number_param(kwargs.pop("temperature", 0.8), "temperature")
    cid_config(lam, temperature=temperature, bounded_eps=bounded_eps, min_new_tokens=0)
    return _Checked(contexts, queries, tmpl, lam, bounded_eps, temperature), kwargs


def _loaded(model: Any, tokenizer: Any, chat: bool | None) -> InProcessLM:
    """The model to decode with: a name loaded in-process, a ctxleak LM as it is, or a
    transformers model wrapped with its tokenizer (in its chat template where ``chat`` says so,
    by default where the tokenizer has one)."""
    if isinstance(model, str):
        return load_model(model).in_process("cid_generate runs transformers' generate on the "
                                            "model's weights")
    if isinstance(model, LM):
        return model
    if tokenizer is None:
        raise ConfigError("cid_generate needs the model's tokenizer", param="tokenizer")
    return from_objects(model, tokenizer, chat_template=bool(
        getattr(tokenizer, "chat_template", None)) if chat is None else chat)


def _decoding_kwargs(lm: InProcessLM, kwargs: dict[str, Any], temperature: float) -> None:
    """CID's defaults set in ``generate``'s keywords (sampling, 50 new tokens, the model's EOS
    and padding ids), the model's own truncation, masks and penalties neutralised."""
    kwargs.setdefault("do_sample", True)
    kwargs.setdefault("max_new_tokens", 50)
    _neutralise_model_config(lm.model, kwargs)
    if kwargs["do_sample"]:
        kwargs["temperature"] = temperature
    kwargs.setdefault("eos_token_id", list(lm.eos_ids) or None)
    kwargs.setdefault("pad_token_id", pad_id(lm))


def _prompt_parts(lm: InProcessLM, checked: _Checked, reserve: int) -> list[PromptParts]:
    """Each row's prompts with and without its context, the context cut (warned) to leave
    ``reserve`` new tokens in the model's window."""
    parts = []
    for i, (ctx, q) in enumerate(zip(checked.contexts, checked.queries)):
        part, dropped = document_parts(lm, (ctx,), q, checked.template, reserve=reserve)
        if dropped:
            warn(f"context {i} cut by {dropped} tokens to fit the model's window")
        parts.append(part)
    return parts


def _generated(lm: InProcessLM, parts: Sequence[PromptParts],
               processor: ContextInfluenceProcessor, kwargs: dict[str, Any]) -> CIDGeneration:
    """``generate`` run on the left-padded prompts with the context, the processor mixing in
    the ones without it (and the caller's own processors and stopping criteria after its)."""
    ids, mask, _ = left_pad([p.full for p in parts], kwargs["pad_token_id"], lm.device)
    hooks = processor.generate_kwargs()
    hooks["logits_processor"].extend(kwargs.pop("logits_processor", None) or [])
    hooks["stopping_criteria"].extend(kwargs.pop("stopping_criteria", None) or [])
    with torch.inference_mode():
        out = lm.model.generate(input_ids=ids, attention_mask=mask, **hooks, **kwargs)
    sequences = out.sequences if hasattr(out, "sequences") else out
    ledger = processor.ledger_for(sequences)
    responses = [row.response_ids for row in ledger]
    texts = [lm.decode(r) if lm.tokenizer is not None else "" for r in responses]
    return CIDGeneration(sequences=sequences, prompt_length=ids.shape[1],
                         response_ids=responses, texts=texts, ledger=ledger)
