"""Expected context influence over a dataset (paper 000, Def. 3.3, Eq. 5): one CID response per
example, its token and response influence, n-gram windows, regurgitation and quality."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxleak.engine.models import LM
from ctxleak.errors import warn
from ctxleak.methods.influence.cid import (
    CIDConfig,
    CIDResponse,
    generate_cid_many,
    replay_cid,
)
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.methods.influence.metrics import (
    context_token_fraction,
    is_repeat,
    is_rouge_repeat,
    mean_curve,
    mean_with_ci,
    rouge_l_f1,
)
from ctxleak.methods.influence.ngrams import (
    PromptParts,
    WindowRequest,
    window_influence_many,
    windows,
)
from ctxleak.methods.influence.quantities import expected_influence

#: Hand each example's full-prompt KV cache from generation to its n-gram scoring (the same
#: numbers: the prefill is computed in scoring's own shape); False recomputes it (benchmarks).
HAND_OVER_PREFILL = True


@dataclass(frozen=True)
class Setting:
    """One cell of a sweep: λ, temperature and context size (None = whole context)."""

    lam: float
    temperature: float
    context_tokens: int | None = None

    @property
    def key(self) -> str:
        k = "all" if self.context_tokens is None else str(self.context_tokens)
        return f"lambda={self.lam:g},T={self.temperature:g},context={k}"


@dataclass(frozen=True)
class InfluenceOptions:
    """Everything but λ and T, which vary by :class:`Setting`."""

    max_new_tokens: int = 50
    min_new_tokens: int = 10
    bounded_eps: float | None = None
    ngram: int | None = None  # None: only the whole context (n = |D|)
    stride: int | None = None
    template: str | None = None
    repeat_threshold: float = 0.5
    rouge_threshold: float = 0.5
    reuse_prefix: bool = True

    def cid(self, setting: Setting) -> CIDConfig:
        return CIDConfig(lam=setting.lam, temperature=setting.temperature,
                         max_new_tokens=self.max_new_tokens, min_new_tokens=self.min_new_tokens,
                         bounded_eps=self.bounded_eps)


def _round(values: Sequence[float] | np.ndarray, digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def measure_example(lm: LM, example: InfluenceExample, setting: Setting,
                    options: InfluenceOptions, seed: int,
                    batch_size: str | int | None = "auto", batch_invariant: bool = True
                    ) -> dict[str, Any]:
    """Generate by CID and measure the context's influence on one example (one JSON record)."""
    return measure_examples(lm, [(example, setting, seed)], options, batch_size,
                            batch_invariant=batch_invariant)[0]


def example_parts(lm: LM, example: InfluenceExample, setting: Setting,
                  options: InfluenceOptions) -> tuple[PromptParts, int]:
    """The example's prompt parts under ``setting`` (context cut to the window) and how many
    context tokens the window forced out."""
    return prompt_parts(lm, example, options.template, setting.context_tokens,
                        reserve=options.max_new_tokens)


def measure_examples(lm: LM, jobs: Sequence[tuple[InfluenceExample, Setting, int]],
                     options: InfluenceOptions, batch_size: str | int | None = "auto", *,
                     batch_invariant: bool = True) -> list[dict[str, Any]]:
    """Measure several (example, setting, seed) together, one JSON record each, in order: their
    CID responses decoded in one batched KV cache (each from its own seed, so its tokens do not
    depend on the batch), then the n-gram windows scored
    (:func:`~ctxleak.methods.influence.ngrams.window_influence_many`).

    ``batch_invariant``: every float of a record comes from forward passes over its own example
    only (issue 13): the response's log-probs, λ_t and ε recomputed by
    :func:`~ctxleak.methods.influence.cid.replay_cid`, the windows of each example scored alone
    with rows per pass from the token budget (``batch_size`` then only sets the examples
    decoded together). Off: the generation's own floats and the windows of all the examples in
    shared scoring passes (``batch_size`` N rows each), equal up to float noise (about 1e-5)."""
    parts = []
    for example, setting, _ in jobs:
        p, dropped = example_parts(lm, example, setting, options)
        if dropped:
            warn(f"example {example.id}: context cut by {dropped} tokens to fit the "
                 "model's window")
        parts.append((p, dropped))
    # with n-gram windows, each prompt with the context is prefilled alone and its KV cache
    # handed to the scoring, which then does not compute that prefix again
    responses = generate_cid_many(lm, [(p.full, p.empty, options.cid(setting), seed)
                                       for (p, _), (_, setting, seed) in zip(parts, jobs)],
                                  keep_context_cache=HAND_OVER_PREFILL and options.ngram is not None
                                  and options.reuse_prefix)
    configs = [options.cid(setting) for _, setting, _ in jobs]
    # batch-invariant: each response's floats from its own example's passes. At a fixed λ with
    # n-gram windows, the example's window scoring gives them (its full-context row is
    # log p̄_λ(y_t | D); with_empty adds the no-context row), so no separate replay is needed
    from_windows: set[int] = set()
    if batch_invariant:
        if options.ngram is not None and options.bounded_eps is None:
            from_windows = {k for k, r in enumerate(responses) if r.token_ids}
        responses = [r if k in from_windows else
                     replay_cid(lm, parts[k][0].full, parts[k][0].empty, configs[k], r)
                     for k, r in enumerate(responses)]
    if options.ngram is None:
        return [_record(lm, ex, setting, options, seed, p, dropped, response) for
                (ex, setting, seed), (p, dropped), response in zip(jobs, parts, responses)]
    todo = [k for k, r in enumerate(responses) if r.token_ids]
    requests, clipped = [], set()
    for k in todo:
        p, (example, setting, _) = parts[k][0], jobs[k]
        n = min(options.ngram, len(p.context))
        if n < options.ngram:  # documented choice: clip to the whole context, and record it
            warn(f"example {example.id}: the n-gram size {options.ngram} (ngram) is larger "
                 f"than its context ({len(p.context)} tokens): using n = {n}", param="ngram")
            clipped.add(k)
        # bounded CID: D and every D∖D_i are scored as the mechanism runs on them, each with
        # its own λ_t by Alg. 1 (paper 000, Def. 3.1 with Thm B.1)
        response = responses[k]
        requests.append(WindowRequest(p, response.token_ids,
                                      windows(len(p.context), n, options.stride),
                                      lam=setting.lam, temperature=setting.temperature,
                                      min_new_tokens=options.min_new_tokens,
                                      prefix_cache=response.context_cache,
                                      bounded_eps=options.bounded_eps))
        response.context_cache = None  # the request holds it until scored
    if batch_invariant:
        scored = [window_influence_many(lm, [r], reuse_prefix=options.reuse_prefix,
                                        batch_size="auto", with_empty=k in from_windows)[0]
                  for k, r in zip(todo, requests)]
    else:
        scored = window_influence_many(lm, requests, reuse_prefix=options.reuse_prefix,
                                       batch_size=batch_size)
    for k, win in zip(todo, scored):
        if k in from_windows:
            r = responses[k]
            responses[k] = CIDResponse(r.token_ids, [float(x) for x in win.logp_context],
                                       [float(x) for x in win.logp_empty],  # type: ignore[union-attr]
                                       r.lambdas,
                                       stopped_on_eos=r.stopped_on_eos)
    records = [_record(lm, ex, setting, options, seed, p, dropped, response)
               for (ex, setting, seed), (p, dropped), response in zip(jobs, parts, responses)]
    for k in clipped:
        records[k]["ngram_clipped_from"] = options.ngram
    for k, request, win in zip(todo, requests, scored):
        per_window = win.per_window
        records[k].update({
            "ngram": min(options.ngram, len(request.parts.context)),
            "windows": [list(s) for s in request.spans],
            "window_influence": _round(per_window),
            "window_logp": [_round(row) for row in win.logp_ablated],
            "max_window_influence": float(per_window.max()) if len(per_window) else None,
            "max_window": int(per_window.argmax()) if len(per_window) else None,
        })
    return records


def _record(lm: LM, example: InfluenceExample, setting: Setting, options: InfluenceOptions,
            seed: int, parts: PromptParts, dropped: int, response: CIDResponse
            ) -> dict[str, Any]:
    """The record of one CID response: tokens, per-token log-probs and influence (Def. 3.1-3.2),
    regurgitation and ROUGE-L, bounded-CID ε."""
    text = lm.decode(response.token_ids)
    context_text = lm.decode(list(parts.context))
    record: dict[str, Any] = {
        "setting": setting.key, "lambda": setting.lam, "temperature": setting.temperature,
        "context_tokens": len(parts.context), "context_truncated_by": dropped,
        "seed": seed, "response": text, "response_ids": response.token_ids,
        "stopped_on_eos": response.stopped_on_eos,
        "logp_context": _round(response.logp_context), "logp_empty": _round(response.logp_empty),
        "token_influence": _round(response.token_influence), "influence": response.influence,
        "context_token_fraction": context_token_fraction(response.token_ids, parts.context),
        "repeat": is_repeat(response.token_ids, parts.context, options.repeat_threshold),
        "rouge_context": rouge_l_f1(text, context_text),
        "rouge_repeat": is_rouge_repeat(text, context_text, options.rouge_threshold),
        "rouge_l": rouge_l_f1(text, example.reference) if example.reference else None,
    }
    if options.bounded_eps is not None:
        # eps, composed_eps: the guarantee (ε per released token, basic composition, paper 000
        # Thm B.1); the ex-post figures are about this context alone, not a DP guarantee
        record.update({"eps": options.bounded_eps, "lambdas": _round(response.lambdas),
                       "composed_eps": response.composed_eps,
                       "token_eps_ex_post": _round(response.token_eps_ex_post),
                       "composed_eps_ex_post": response.composed_eps_ex_post})
    return record


def summarize_setting(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """The summary of one setting: expected influence with a bootstrap interval, regurgitation
    counts, ROUGE-L, the per-position curve and, for n-gram runs, the per-window curve."""
    infl = [r["influence"] for r in records]
    rouge = [r["rouge_l"] for r in records if r.get("rouge_l") is not None]
    first = records[0] if records else {}
    out: dict[str, Any] = {
        "setting": first.get("setting"), "lambda": first.get("lambda"),
        "temperature": first.get("temperature"), "n": len(records),
        "influence": expected_influence(infl, seed=seed),
        "mean_tokens": float(np.mean([len(r["response_ids"]) for r in records])) if records
        else None,
        "repeat_prompts": int(sum(r["repeat"] for r in records)),
        "rouge_prompts": int(sum(r["rouge_repeat"] for r in records)),
        "rouge_l": mean_with_ci(rouge, seed=seed) if rouge else None,
        "per_position_influence": mean_curve([r["token_influence"] for r in records]),
        "mean_context_tokens": float(np.mean([r["context_tokens"] for r in records]))
        if records else None,
        # contexts cut to the model's window, and n-grams clipped to the context (SPEC §9)
        "truncated_contexts": sum(1 for r in records if r.get("context_truncated_by")),
        "context_tokens_cut": int(sum(r.get("context_truncated_by") or 0 for r in records)),
        "ngram_clipped": sum(1 for r in records if r.get("ngram_clipped_from")),
    }
    if any("window_influence" in r for r in records):
        curve = mean_curve([r["window_influence"] for r in records if "window_influence" in r])
        out["per_window_influence"] = curve
        out["max_window_influence"] = mean_with_ci(
            [r["max_window_influence"] for r in records
             if r.get("max_window_influence") is not None], seed=seed)
    if any("composed_eps" in r for r in records):
        for key in ("composed_eps", "composed_eps_ex_post"):
            out[key] = mean_with_ci([r[key] for r in records if r.get(key) is not None],
                                    seed=seed)
        out["mean_lambda"] = float(np.mean([np.mean(r["lambdas"]) for r in records
                                            if r.get("lambdas")]))
    return out


def settings_grid(lams: Sequence[float], temps: Sequence[float],
                  context_sizes: Sequence[int | None]) -> list[Setting]:
    return [Setting(lam, t, k) for k in context_sizes for t in temps for lam in lams]

