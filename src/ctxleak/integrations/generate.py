"""``cid_generate``: Context Influence Decoding (paper 000, Def. 3.4; bounded CID: App. B,
Alg. 1) through ``model.generate`` in one call, with ctxleak's exact-ids prompts and the
per-token ledger of :class:`~ctxleak.integrations.transformers.ContextInfluenceProcessor`.

Also importable from :mod:`ctxleak.integrations.transformers` (``cid_generate``,
``CIDGeneration``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ctxleak.engine.forward import left_pad
from ctxleak.engine.models import LM
from ctxleak.errors import ConfigError, warn
from ctxleak.integrations.ledger import RowLedger, ledger_result
from ctxleak.integrations.transformers import ContextInfluenceProcessor

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
TRUNCATION = ("top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")
_NEUTRAL = {"top_k": 0, "top_p": 1.0, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}


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
        return [{**row.to_record(), "response": text} for row, text in zip(self.ledger, self.texts)]

    def to_result(self, *, seed: int = 0) -> Any:
        """The ledger and texts as an :class:`~ctxleak.results.InfluenceResult` (``show``,
        ``to_pandas``, ``save``, ``to_html``; see :func:`~ctxleak.integrations.ledger.ledger_result`)."""
        return ledger_result(self.ledger, self.texts, seed=seed)


def _check_generate_kwargs(kwargs: dict[str, Any], bounded: bool) -> None:
    for key, mode in UNSUPPORTED.items():
        value = kwargs.get(key)
        if value is not None and not (key == "num_beam_groups" and value == 1):
            raise ConfigError(f"{key}: {mode} is not supported with Context Influence Decoding "
                              "(greedy, sampling and beam search are)")
    if bounded:
        truncated = [k for k in TRUNCATION if kwargs.get(k) not in (None, _NEUTRAL.get(k))]
        if not kwargs.get("do_sample", True) or kwargs.get("num_beams", 1) != 1 or truncated:
            raise ConfigError(
                "bounded_eps: the ε-DP bound holds for pure temperature sampling from p̄_λ "
                "(paper 000, App. B); drop do_sample=False, num_beams and "
                f"{', '.join(truncated) or 'truncation (top_k, top_p, ...)'}")


def cid_generate(model: Any, tokenizer: Any = None, *, context: str | Sequence[str],
                 query: str | Sequence[str] = "", lam: float = 1.0,
                 bounded_eps: float | None = None, template: str | None = None,
                 chat: bool | None = None, **generate_kwargs: Any) -> CIDGeneration:
    """Answer ``query`` from the private ``context`` by (bounded) CID with ``model.generate``.

    Both prompts are built by ctxleak's exact-ids rule (template pieces and slots tokenised
    separately; the no-context prompt keeps the template with an empty slot; default template
    ``Document: {context}. {query}``, paper 000 Fig. 5-6), left-padded with an attention mask.
    ``model``: a transformers causal LM with its ``tokenizer``, a ctxleak LM, or a model name for
    :func:`ctxleak.load_model`. ``context`` and ``query``: one string or one per row. ``chat``:
    wrap the prompt in the model's chat template (default: when the tokenizer has one).
    ``generate_kwargs`` go to ``generate``; the defaults are CID's: ``do_sample=True``,
    ``temperature=0.8``, ``max_new_tokens=50``, no top-k/top-p (the ledger's temperature is
    ``temperature``, also with ``do_sample=False``).
    """
    from ctxleak.engine.forward import pad_id
    from ctxleak.engine.models import from_objects, load_model
    from ctxleak.engine.prompts import template_fields
    from ctxleak.methods.influence.data import TASK_TEMPLATES, InfluenceExample, prompt_parts

    if isinstance(model, str):
        lm = load_model(model)
    elif isinstance(model, LM):
        lm = model
    else:
        if tokenizer is None:
            raise ConfigError("cid_generate needs the model's tokenizer")
        lm = from_objects(model, tokenizer, chat_template=bool(
            getattr(tokenizer, "chat_template", None)) if chat is None else chat)
    contexts = [context] if isinstance(context, str) else list(context)
    queries = [query] * len(contexts) if isinstance(query, str) else list(query)
    if len(queries) != len(contexts) or not contexts:
        raise ConfigError(f"{len(contexts)} contexts and {len(queries)} queries: give one each")
    for i, text in enumerate(contexts):
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"context {i} is empty: CID needs a context to decode against")
    tmpl = template or TASK_TEMPLATES["qa"]
    if "context" not in template_fields(tmpl):
        raise ConfigError("template must contain the slot {context}")
    kwargs = dict(generate_kwargs)
    _check_generate_kwargs(kwargs, bounded_eps is not None)
    temperature = float(kwargs.pop("temperature", 0.8))
    kwargs.setdefault("do_sample", True)
    kwargs.setdefault("max_new_tokens", 50)
    if kwargs["do_sample"]:
        kwargs["temperature"] = temperature
        kwargs.setdefault("top_k", 0)
    eos = kwargs.setdefault("eos_token_id", list(lm.eos_ids) or None)
    pad = kwargs.setdefault("pad_token_id", pad_id(lm))
    parts = []
    for i, (ctx, q) in enumerate(zip(contexts, queries)):
        example = InfluenceExample(id=str(i), context=ctx, query=q, reference=None, task="qa")
        part, dropped = prompt_parts(lm, example, tmpl, reserve=int(kwargs["max_new_tokens"]))
        if dropped:
            warn(f"context {i} cut by {dropped} tokens to fit the model's window")
        parts.append(part)
    processor = ContextInfluenceProcessor(
        lm, [p.empty for p in parts], full_ids=[p.full for p in parts], lam=lam,
        temperature=temperature, bounded_eps=bounded_eps,
        eos_token_id=eos if eos is not None else [])
    ids, mask, _ = left_pad([p.full for p in parts], pad, lm.device)
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
