"""White-box probing with a trained soft prompt (ProPILE: Probing Privacy Leakage in Large Language
Models, App. A.4).

``m`` trainable vectors ``S = (s_1 .. s_m)`` in the model's input-embedding space are placed
after the BOS ids (if any) and before the first probing template; the model itself stays frozen
(its parameters get ``requires_grad=False`` during training and are restored afterwards). With
training pairs (prompt ``x``, target PII ``a``) from a split of subjects, the loss is the
negative log-likelihood of the target,

    L(S) = - (1 / Σ_i L_i) Σ_i Σ_r log p(a_{i,r} | S, x_i, a_{i,<r}),

minimised with AdamW, learning rate 0.005 (the soft-prompt tuning convention the paper follows).
After each epoch the soft prompt is scored on the training subjects by exact match of a greedy
generation (the paper's selection rule; ties go to the lower training NLL), and the best one is
kept. Evaluation on held-out subjects uses greedy decoding, as in the paper.

The prompt vectors start as the embeddings of ``m`` random vocabulary tokens (seeded), the usual
initialisation of prompt tuning.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from ctxleak.engine.forward import head_logits, hidden_states, pad_id
from ctxleak.engine.gradients import frozen_weights
from ctxleak.engine.lm import InProcessLM

__all__ = [
    "SoftPromptConfig",
    "SoftPromptResult",
    "soft_prompt_greedy",
    "soft_prompt_logprobs",
    "train_soft_prompt",
]


@dataclass(frozen=True)
class SoftPromptConfig:
    """Hyper-parameters of App. A.4 (the paper trains 700 epochs; a CPU run uses fewer)."""

    n_tokens: int = 20
    lr: float = 0.005
    epochs: int = 30
    batch_size: int = 16
    weight_decay: float = 0.01
    seed: int = 0
    eval_every: int = 1

    def validate(self) -> SoftPromptConfig:
        if self.n_tokens < 1:
            raise ValueError(f"the soft prompt needs at least 1 vector, got {self.n_tokens}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ValueError(f"the learning rate must be > 0, got {self.lr}")
        if self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("batch_size and eval_every must be >= 1")
        return self


@dataclass
class SoftPromptResult:
    """The selected soft prompt ``[m, d]`` (float32, CPU), its epoch (0 = the initial one),
    per-epoch history (``epoch``, ``train_nll`` = mean summed NLL of a target, ``exact_match``),
    the initial training NLL and the training time."""

    embeddings: torch.Tensor
    best_epoch: int
    history: list[dict[str, Any]] = field(default_factory=list)
    initial_nll: float = math.nan
    seconds: float = 0.0


def _split_bos(lm: InProcessLM, ids: Sequence[int]) -> int:
    """Where the soft prompt goes: after the model's BOS ids when the prompt starts with them."""
    bos = list(lm.bos_ids)
    return len(bos) if bos and list(ids[:len(bos)]) == bos else 0


def _embed(lm: InProcessLM, ids: Sequence[int]) -> torch.Tensor:
    tensor = torch.as_tensor([list(ids)], dtype=torch.long, device=lm.device)
    return cast("torch.Tensor", lm.model.get_input_embeddings()(tensor)[0])


def _sequence(lm: InProcessLM, soft: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """Input embeddings of ``ids[:k] + soft + ids[k:]`` (k = BOS length)."""
    k = _split_bos(lm, ids)
    emb = _embed(lm, ids)
    return torch.cat([emb[:k], soft.to(device=emb.device, dtype=emb.dtype), emb[k:]], dim=0)


def _target_logits(lm: InProcessLM, soft: torch.Tensor, prompts: Sequence[Sequence[int]],
                   targets: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """LM-head logits ``[L_i, V]`` at the target positions of each (soft, prompt, target)
    sequence: one right-padded forward pass (positions 0..n-1 on every row)."""
    seqs = [_sequence(lm, soft, list(p) + list(t)) for p, t in zip(prompts, targets)]
    width = max(s.shape[0] for s in seqs)
    dim = seqs[0].shape[1]
    pad = _embed(lm, [pad_id(lm)])[0]
    embeds = pad.expand(len(seqs), width, dim).clone()
    mask = torch.zeros((len(seqs), width), dtype=torch.long, device=lm.device)
    for row, s in enumerate(seqs):
        embeds[row, :s.shape[0]] = s
        mask[row, :s.shape[0]] = 1
    pos = torch.arange(width, device=lm.device).expand(len(seqs), width)
    hidden, _ = hidden_states(lm, attention_mask=mask, position_ids=pos, inputs_embeds=embeds)
    out = []
    for row, (s, t) in enumerate(zip(seqs, targets)):
        end = s.shape[0]
        out.append(head_logits(lm, hidden[row, end - len(t) - 1:end - 1]))
    return out


def soft_prompt_logprobs(lm: InProcessLM, soft: torch.Tensor, prompts: Sequence[Sequence[int]],
                         targets: Sequence[Sequence[int]], *,
                         batch_size: int = 16) -> list[np.ndarray]:
    """Teacher-forced ``log p(a_r | S, prompt, a_<r)`` of each target (float64 log-softmax)."""
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            sl = slice(start, start + batch_size)
            for logits, t in zip(_target_logits(lm, soft, prompts[sl], targets[sl]), targets[sl]):
                logp = torch.log_softmax(logits.double(), dim=-1)
                idx = torch.as_tensor(list(t), dtype=torch.long, device=logp.device)
                out.append(logp.gather(1, idx[:, None])[:, 0].cpu().numpy())
    return out


def soft_prompt_greedy(lm: InProcessLM, soft: torch.Tensor, prompts: Sequence[Sequence[int]], *,
                       max_new_tokens: int, batch_size: int = 16) -> list[list[int]]:
    """Greedy decoding after (soft prompt, prompt): left-padded embeddings with an attention
    mask and position ids, then one token per step through the KV cache; EOS ends a row."""
    eos = set(lm.eos_ids)
    out: list[list[int]] = []
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start:start + batch_size]
            seqs = [_sequence(lm, soft, p) for p in chunk]
            width = max(s.shape[0] for s in seqs)
            pad = _embed(lm, [pad_id(lm)])[0]
            embeds = pad.expand(len(seqs), width, pad.shape[0]).clone()
            mask = torch.zeros((len(seqs), width), dtype=torch.long, device=lm.device)
            for row, s in enumerate(seqs):
                embeds[row, width - s.shape[0]:] = s
                mask[row, width - s.shape[0]:] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            hidden, cache = hidden_states(lm, attention_mask=mask, position_ids=pos,
                                          inputs_embeds=embeds, use_cache=True)
            rows: list[list[int]] = [[] for _ in chunk]
            done = [False] * len(chunk)
            for step in range(max_new_tokens):
                tokens = torch.argmax(head_logits(lm, hidden[:, -1]).double(), dim=-1)
                for row, tok in enumerate(tokens.tolist()):
                    if not done[row]:
                        if tok in eos:
                            done[row] = True
                        else:
                            rows[row].append(int(tok))
                if all(done) or step + 1 == max_new_tokens:
                    break
                new = tokens[:, None].to(lm.device)
                mask = torch.cat([mask, torch.ones_like(new)], dim=1)
                pos = pos[:, -1:] + 1
                hidden, cache = hidden_states(lm, new, mask, pos, cache=cache, use_cache=True)
            out.extend(rows)
    return out


def _initial(lm: InProcessLM, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    vocab = min(lm.vocab_size, len(lm.tokenizer))
    special = set(getattr(lm.tokenizer, "all_special_ids", []) or [])
    ids: list[int] = []
    while len(ids) < n:
        i = int(torch.randint(vocab, (1,), generator=gen))
        if i not in special:
            ids.append(i)
    with torch.no_grad():
        return _embed(lm, ids).detach().float().cpu().clone()


def _train_epoch(lm: InProcessLM, soft: torch.nn.Parameter, optimizer: torch.optim.Optimizer,
                 prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                 order: list[int], batch_size: int) -> None:
    """One epoch of AdamW steps over the pairs in ``order``, ``batch_size`` at a time, each on
    the loss L(S) of its batch: the targets' summed NLL over their token count (App. A.4)."""
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        with torch.enable_grad():
            logits = _target_logits(lm, soft, [prompts[i] for i in idx],
                                    [targets[i] for i in idx])
            nll = sum(torch.nn.functional.cross_entropy(
                lg.float(), torch.as_tensor(list(targets[i]), device=lg.device),
                reduction="sum") for lg, i in zip(logits, idx))
            loss = nll / sum(len(targets[i]) for i in idx)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[union-attr]  # a sum of tensors
        optimizer.step()


def _better(entry: dict[str, Any], best: dict[str, Any]) -> bool:
    """The paper's selection rule: the higher exact match on the training subjects, ties to
    the lower training NLL."""
    em, best_em = entry.get("exact_match", 0.0), best.get("exact_match", 0.0)
    return cast("bool", em > best_em or (em == best_em and entry["train_nll"] < best["train_nll"]))


def train_soft_prompt(lm: InProcessLM, prompts: Sequence[Sequence[int]],
                      targets: Sequence[Sequence[int]], config: SoftPromptConfig | None = None,
                      *, exact_match: Callable[[list[list[int]]], float] | None = None,
                      max_new_tokens: int = 20,
                      progress: Callable[[dict[str, Any]], None] | None = None
                      ) -> SoftPromptResult:
    """Train a soft prompt on (prompt ids, target ids) pairs with the model frozen (App. A.4).

    ``exact_match(generations)`` turns the greedy generations (new ids, one per training pair)
    into the exact-match rate used to pick the best epoch; without it the lowest training NLL
    decides. ``progress(entry)`` is called with each history entry.
    """
    config = (config or SoftPromptConfig()).validate()
    if not prompts or len(prompts) != len(targets) or any(len(t) == 0 for t in targets):
        raise ValueError("need one non-empty target per prompt, and at least one pair")
    model = lm.model
    t0 = time.time()
    was_training = model.training
    soft = torch.nn.Parameter(_initial(lm, config.n_tokens, config.seed).to(lm.device))
    optimizer = torch.optim.AdamW([soft], lr=config.lr, weight_decay=config.weight_decay)
    order_gen = torch.Generator().manual_seed(config.seed + 1)

    def evaluate(epoch: int) -> dict[str, Any]:
        lps = soft_prompt_logprobs(lm, soft.detach(), prompts, targets,
                                   batch_size=config.batch_size)
        entry = {"epoch": epoch, "train_nll": -float(np.mean([lp.sum() for lp in lps]))}
        if exact_match is not None:
            gens = soft_prompt_greedy(lm, soft.detach(), prompts, max_new_tokens=max_new_tokens,
                                      batch_size=config.batch_size)
            entry["exact_match"] = float(exact_match(gens))
        return entry

    with frozen_weights(model):
        try:
            model.eval()
            best = evaluate(0)
            history = [best]
            initial_nll = best["train_nll"]
            best_soft = soft.detach().clone()
            if progress:
                progress(best)
            for epoch in range(1, config.epochs + 1):
                order = torch.randperm(len(prompts), generator=order_gen).tolist()
                _train_epoch(lm, soft, optimizer, prompts, targets, order, config.batch_size)
                if epoch % config.eval_every == 0 or epoch == config.epochs:
                    entry = evaluate(epoch)
                    history.append(entry)
                    if progress:
                        progress(entry)
                    if _better(entry, best):
                        best, best_soft = entry, soft.detach().clone()
        finally:
            model.train(was_training)
    return SoftPromptResult(embeddings=copy.deepcopy(best_soft).float().cpu(),
                            best_epoch=int(best["epoch"]), history=history,
                            initial_nll=initial_nll, seconds=time.time() - t0)
