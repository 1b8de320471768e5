"""The runners of a probe run (ProPILE: Probing Privacy Leakage in Large Language Models): which
model and which generator/scorer measure each (mode, variant) of probe items; the white-box soft
prompts (App. A.4) trained or reloaded from the run directory; the canary check's fine-tuned copy."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ctxleak.engine.batching import example_passes, policy_of
from ctxleak.engine.lm import InProcessLM, LanguageModel
from ctxleak.methods.pii.canary import FinetuneConfig, finetune_copy
from ctxleak.methods.pii.items import encode_item
from ctxleak.methods.pii.metrics import exact_match
from ctxleak.methods.pii.plan import Plan
from ctxleak.methods.pii.probe import likelihood_fields, probe_batch
from ctxleak.methods.pii.softprompt import (
    SoftPromptConfig,
    soft_prompt_greedy,
    soft_prompt_logprobs,
    train_soft_prompt,
)
from ctxleak.run.runner import say

#: Why white-box probing and canary fine-tuning need the model in-process (a refusal's words).
WHITE_BOX_NEEDS = ("white-box soft prompts are trained by gradients through the model's input "
                   "embeddings: load the model in-process")
CANARY_NEEDS = ("canary probing fine-tunes a copy of the model's weights: load the model "
                "in-process")


def probe_runners(lm: LanguageModel, tuned: Any, soft: dict[str, Any], options: Any
                  ) -> dict[tuple[Any, ...], Callable[..., Any]]:
    runners: dict[tuple[Any, ...], Callable[..., Any]] = {
        ("black-box", "beam", None): lambda items: probe_batch(lm, items, options),
        ("in-context", "beam", None): lambda items: probe_batch(lm, items, options),
        ("white-box", "beam", None): lambda items: probe_batch(lm, items, options),
        ("canary", "base", None): lambda items: probe_batch(lm, items, options),
    }
    scoring = dataclasses.replace(options, generate=False)
    runners[("canary", "base-likelihood", None)] = lambda items: probe_batch(lm, items, scoring)
    if tuned is not None:
        runners[("canary", "fine-tuned", None)] = lambda items: probe_batch(tuned, items, options)
        runners[("canary", "fine-tuned-likelihood", None)] = \
            lambda items: probe_batch(tuned, items, scoring)
    for pii_type, embeddings in soft.items():
        local = lm.in_process(WHITE_BOX_NEEDS)
        runners[("white-box", "soft-prompt", pii_type)] = soft_prompt_runner(local, embeddings,
                                                                             options)
    return runners


def soft_prompt_runner(lm: InProcessLM, embeddings: Any, options: Any) -> Callable[..., Any]:
    def generator(prompts: Sequence[Sequence[int]], max_new: int) -> list[list[int]]:
        return soft_prompt_greedy(lm, embeddings, prompts, max_new_tokens=max_new)

    def scorer(encoded: Sequence[Any]) -> list[dict[str, Any]]:
        # the items that may share forward passes (each alone under a batch-invariant policy)
        rows: list[dict[str, Any]] = [{} for _ in encoded]
        for part in example_passes(policy_of(lm), range(len(encoded))):
            for i, row in zip(part, score_together([encoded[i] for i in part])):
                rows[i] = row
        return rows

    def score_together(encoded: Sequence[Any]) -> list[dict[str, Any]]:
        prompts = [e.prompt for e in encoded]
        targets = soft_prompt_logprobs(lm, embeddings, prompts, [e.target for e in encoded])
        has_null = [i for i, e in enumerate(encoded) if e.null]
        nulls = soft_prompt_logprobs(lm, embeddings, [encoded[i].prompt for i in has_null],
                                     [encoded[i].null for i in has_null]) if has_null else []
        null_of = dict(zip(has_null, nulls))
        return [likelihood_fields(targets[i], null_of.get(i)) for i in range(len(encoded))]

    return lambda items: probe_batch(lm, items, options, generator=generator, scorer=scorer)


def train_soft_prompts(lm: LanguageModel, run: Any, plan: Plan, config: dict[str, Any], options: Any,
                        seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train (or, on --resume, reload) one soft prompt per PII type."""
    cfg = SoftPromptConfig(n_tokens=config["soft_tokens"], lr=config["soft_lr"],
                           epochs=config["epochs"], seed=seed)
    soft: dict[str, Any] = {}
    info: dict[str, Any] = {}
    for pii_type, items in plan.train_items.items():
        npy, meta = run.path / f"soft_prompt_{pii_type}.npy", run.path / f"soft_prompt_{pii_type}.json"
        if npy.is_file() and meta.is_file():
            soft[pii_type] = torch.from_numpy(np.load(npy)).to(lm.device)
            info[pii_type] = json.loads(meta.read_text(encoding="utf-8"))
            say(f"white-box {pii_type}: reusing the trained soft prompt in {npy.name}")
            continue
        encoded = [encode_item(lm, it, chat=options.chat) for it in items]

        def em(gens: list[list[int]], items: list[Any] = items) -> float:
            return float(np.mean([exact_match(it.target, lm.decode(g))
                                  for it, g in zip(items, gens)]))

        say(f"white-box {pii_type}: training {cfg.n_tokens} soft-prompt vectors on "
            f"{len(items)} prompts for {cfg.epochs} epochs")
        result = train_soft_prompt(lm.in_process(WHITE_BOX_NEEDS), [e.prompt for e in encoded],
                                   [e.target for e in encoded],
                                   cfg, exact_match=em,
                                   max_new_tokens=options.max_new_tokens[pii_type])
        soft[pii_type] = result.embeddings.to(lm.device)
        info[pii_type] = {"n_train_prompts": len(items),
                          "n_train_subjects": len({it.subject_id for it in items}),
                          "best_epoch": result.best_epoch, "initial_nll": result.initial_nll,
                          "seconds": result.seconds, "history": result.history,
                          "config": cfg.__dict__}
        buf = io.BytesIO()
        np.save(buf, result.embeddings.numpy())
        run.write_file(npy.name, buf.getvalue())
        run.write_file(meta.name, json.dumps(info[pii_type], indent=1))
        say(f"white-box {pii_type}: best epoch {result.best_epoch}, training NLL "
            f"{result.initial_nll:.2f} -> {result.history[-1]['train_nll']:.2f} "
            f"in {result.seconds:.1f}s")
    return soft, info


def finetune_canary(lm: LanguageModel, plan: Plan, config: dict[str, Any],
                    seed: int) -> tuple[Any, dict[str, Any]]:
    cfg = FinetuneConfig(epochs=config["canary_epochs"], lr=config["canary_lr"],
                         train_layers=config["canary_layers"], seed=seed)
    texts = [d for r in plan.inserted for d in r.documents]
    say(f"canary: fine-tuning a copy of the model on {len(texts)} documents of "
        f"{len(plan.inserted)} subjects ({cfg.epochs} epochs, lr {cfg.lr}, "
        + (f"last {cfg.train_layers} blocks)" if cfg.train_layers else "all weights)"))
    result = finetune_copy(lm.in_process(CANARY_NEEDS), texts, cfg,
                           progress=lambda e, loss: say(f"canary: epoch {e} loss {loss:.3f}"))
    say(f"canary: fine-tuned in {result.seconds:.1f}s ({result.steps} steps, "
        f"{result.n_trainable:,} trainable parameters)")
    info = {**result.to_dict(), "config": cfg.__dict__, "n_documents": len(texts),
            "inserted": [r.subject_id for r in plan.inserted],
            "held_out": [r.subject_id for r in plan.held_out]}
    return result.lm, info
