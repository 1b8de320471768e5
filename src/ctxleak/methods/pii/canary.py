"""Canary check: does PII probing detect PII that a model was really trained on?

The subjects are split into ``N`` *inserted* and ``N`` *held-out* ones (seeded). A copy of the
model is fine-tuned with the language-modelling loss on the documents of the inserted subjects
only (AdamW, a few epochs; the whole model or only its last ``k`` transformer blocks, seeded),
then both groups are probed the same way (:mod:`ctxleak.methods.pii.probe`), each with null PII
drawn from its own group. Leakage that the probe can see shows as target likelihoods above null
likelihoods (Wilcoxon signed-rank, one-sided) for the inserted subjects and not for the held-out
ones. The original model is never modified.

Null PII must not be predictable from the prompt for the held-out control to be clean: with the
synthetic data, e-mail addresses are built from the subject's name and relatives share the
subject's surname, so a model prefers the true e-mail and relatives' names over another
subject's even without training on them. Phone numbers, addresses and universities carry no
such cue, which makes them the clean canaries.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ctxleak.engine.forward import head_logits, hidden_states, pad_id, right_pad
from ctxleak.engine.lm import InProcessLM
from ctxleak.methods.pii.records import PIIRecord

__all__ = [
    "CANARY_PII",
    "FinetuneConfig",
    "FinetuneResult",
    "canary_verdict",
    "decoder_blocks",
    "finetune_copy",
    "split_subjects",
]

# PII types whose null is not predictable from the name (see the module docstring).
CANARY_PII = ("phone", "address", "university")


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning of the canary copy. ``train_layers`` = 0 trains every parameter, k > 0 only
    the last k transformer blocks (faster on a CPU; the embeddings and head stay frozen)."""

    epochs: int = 4
    lr: float = 2e-3
    batch_size: int = 4
    train_layers: int = 8
    weight_decay: float = 0.0
    max_length: int = 256
    seed: int = 0

    def validate(self) -> FinetuneConfig:
        if self.epochs < 1:
            raise ValueError(f"fine-tuning epochs must be >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ValueError(f"the fine-tuning learning rate must be > 0, got {self.lr}")
        if self.batch_size < 1 or self.max_length < 2:
            raise ValueError("batch_size must be >= 1 and max_length >= 2")
        if self.train_layers < 0:
            raise ValueError(f"train_layers must be >= 0 (0 = all), got {self.train_layers}")
        return self


@dataclass
class FinetuneResult:
    """The fine-tuned copy (an ``LM``), the mean token loss of each epoch (before its updates
    are counted: the running mean over the epoch's batches), the wall time, the number of
    trainable parameters, the training tokens per epoch and the optimiser steps."""

    lm: InProcessLM
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    n_trainable: int = 0
    n_tokens: int = 0
    steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"losses": self.losses, "seconds": self.seconds, "n_trainable": self.n_trainable,
                "n_tokens": self.n_tokens, "steps": self.steps}


def split_subjects(records: Sequence[PIIRecord], n: int, seed: int = 0
                   ) -> tuple[list[PIIRecord], list[PIIRecord]]:
    """``n`` inserted and ``n`` held-out subjects among those with documents, drawn with
    ``random.Random(seed)``. Raises ``ValueError`` when fewer than ``2n`` have documents."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"the canary needs at least 2 subjects per group, got {n!r}")
    pool = [r for r in records if r.documents]
    if len(pool) < 2 * n:
        raise ValueError(f"the canary needs {2 * n} subjects with documents ({n} inserted, "
                         f"{n} held out), but only {len(pool)} have documents")
    chosen = random.Random(seed).sample(pool, 2 * n)
    return chosen[:n], chosen[n:]


def decoder_blocks(model: Any) -> torch.nn.ModuleList:
    """The model's list of transformer blocks: the ``ModuleList`` holding the most parameters
    (``model.layers`` of Llama-like models, ``transformer.h`` of GPT-2)."""
    best, size = None, -1
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0:
            n = sum(p.numel() for p in module.parameters())
            if n > size:
                best, size = module, n
    if best is None:
        raise ValueError("could not find the model's transformer blocks")
    return best


def _token_rows(lm: InProcessLM, texts: Sequence[str], max_length: int) -> list[list[int]]:
    eos = list(lm.eos_ids[:1])
    return [(list(lm.bos_ids) + lm.encode(text) + eos)[:max_length] for text in texts]


def finetune_copy(lm: InProcessLM, texts: Sequence[str], config: FinetuneConfig | None = None, *,
                  progress: Callable[[int, float], None] | None = None) -> FinetuneResult:
    """Fine-tune a deep copy of ``lm.model`` on ``texts`` (next-token loss on every token) and
    return it as a new ``LM`` sharing the tokenizer. ``lm`` is left unchanged.

    Seeded: the data order and any dropout draw from ``torch.manual_seed(config.seed)``.
    """
    config = (config or FinetuneConfig()).validate()
    if not texts:
        raise ValueError("no documents to fine-tune on")
    t0 = time.time()
    model = copy.deepcopy(lm.model)
    for p in model.parameters():
        p.requires_grad_(config.train_layers == 0)
    if config.train_layers:
        blocks = decoder_blocks(model)
        for block in list(blocks)[-config.train_layers:]:
            for p in block.parameters():
                p.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    info = dataclasses.replace(lm.info, name=f"{lm.info.name} (canary fine-tuned)")
    tuned = copy.copy(lm)  # the same conventions and batching, other weights
    tuned.model, tuned.info = model, info
    rows = _token_rows(lm, texts, config.max_length)
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    pad = pad_id(lm)
    losses: list[float] = []
    steps = 0
    model.train()
    try:
        for epoch in range(config.epochs):
            order = torch.randperm(len(rows), generator=gen).tolist()
            total, count = 0.0, 0
            for start in range(0, len(order), config.batch_size):
                batch = [rows[i] for i in order[start:start + config.batch_size]]
                ids, mask, pos = right_pad(batch, pad, tuned.device)
                with torch.enable_grad():
                    hidden, _ = hidden_states(tuned, ids, mask, pos)
                    keep = mask[:, 1:].bool()
                    logits = head_logits(tuned, hidden[:, :-1][keep]).float()
                    labels = ids[:, 1:][keep]
                    loss = torch.nn.functional.cross_entropy(logits, labels)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                optimizer.step()
                steps += 1
                n = int(keep.sum())
                total += float(loss.detach()) * n
                count += n
            losses.append(total / max(count, 1))
            if progress:
                progress(epoch + 1, losses[-1])
    finally:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
    n_tokens = sum(len(r) - 1 for r in rows)
    return FinetuneResult(lm=tuned, losses=losses, seconds=time.time() - t0,
                          n_trainable=sum(p.numel() for p in params), n_tokens=n_tokens,
                          steps=steps)


def canary_verdict(summaries: Sequence[dict[str, Any]], alpha: float = 0.05
                   ) -> list[dict[str, Any]]:
    """Per PII type and structure: the one-sided Wilcoxon p-values (target > null) of the
    inserted and held-out groups, and ``detected`` = inserted p < alpha and held-out p >= alpha
    (a held-out p-value that is undefined counts as no shift). A group ``inserted-vs-inserted``
    (null PII from other inserted subjects), when given, adds ``association_pvalue``."""
    by: dict[tuple[Any, Any], dict[Any, Any]] = {}
    for s in summaries:
        key = (s.get("pii_type"), s.get("structure"))
        by.setdefault(key, {})[s.get("group")] = s
    out = []
    for (pii_type, structure), groups in by.items():
        ins, held = groups.get("inserted"), groups.get("held-out")
        assoc = groups.get("inserted-vs-inserted")
        p_ins = (ins or {}).get("wilcoxon", {}).get("pvalue")
        p_held = (held or {}).get("wilcoxon", {}).get("pvalue")
        detected = (p_ins is not None and p_ins < alpha
                    and (p_held is None or not math.isfinite(p_held) or p_held >= alpha))
        out.append({
            "pii_type": pii_type, "structure": structure,
            "inserted_pvalue": p_ins, "held_out_pvalue": p_held,
            "inserted_median_difference": (ins or {}).get("wilcoxon", {}).get(
                "median_difference"),
            "held_out_median_difference": (held or {}).get("wilcoxon", {}).get(
                "median_difference"),
            "inserted_exact_match_rate": (ins or {}).get("exact_match_rate"),
            "held_out_exact_match_rate": (held or {}).get("exact_match_rate"),
            "detected": bool(detected), "alpha": alpha,
            "association_pvalue": (assoc or {}).get("wilcoxon", {}).get("pvalue")})
    return out
