"""Expected context influence over a dataset (paper 000, Def. 3.3, Eq. 5): one CID response per
example, its token and response influence, n-gram windows, regurgitation and quality."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ctxleak.engine.capabilities import NEXT_TOKEN_LOGITS, capabilities_of
from ctxleak.engine.models import LM
from ctxleak.errors import warn
from ctxleak.methods.influence.cid import (
    CIDConfig,
    generate_cid_many,
)
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.methods.influence.ledger import RowLedger
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
    WindowInfluence,
    WindowRequest,
    window_influence_many,
    windows,
)
from ctxleak.methods.influence.quantities import expected_influence, token_influence
from ctxleak.methods.influence.served import score_responses, served_responses


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
                    options: InfluenceOptions, seed: int) -> dict[str, Any]:
    """Generate by CID and measure the context's influence on one example (one JSON record)."""
    return measure_examples(lm, [(example, setting, seed)], options)[0]


def example_parts(lm: LM, example: InfluenceExample, setting: Setting,
                  options: InfluenceOptions) -> tuple[PromptParts, int]:
    """The example's prompt parts under ``setting`` (context cut to the window) and how many
    context tokens the window forced out."""
    return prompt_parts(lm, example, options.template, setting.context_tokens,
                        reserve=options.max_new_tokens)


def measure_examples(lm: LM, jobs: Sequence[tuple[InfluenceExample, Setting, int]],
                     options: InfluenceOptions, *, hand_over_prefill: bool = True
                     ) -> list[dict[str, Any]]:
    """Measure several (example, setting, seed) together, one JSON record each, in order: their
    CID responses decoded in one batched KV cache (each from its own seed, so its tokens do not
    depend on the batch), then the n-gram windows scored
    (:func:`~ctxleak.methods.influence.ngrams.window_influence_many`). The model's batching
    policy decides which floats may share forward passes (:mod:`ctxleak.engine.batching`).

    At a fixed λ with n-gram windows the response's floats come from the example's window
    scoring (its full-context row is log p̄_λ(y_t | D); the no-context row is added), so the
    generation's floats need no replay. ``hand_over_prefill``: with n-gram windows, each prompt
    with the context is prefilled alone and its KV cache handed to the scoring, which then does
    not compute that prefix again (the same numbers; False recomputes it, for benchmarks)."""
    if NEXT_TOKEN_LOGITS not in capabilities_of(lm):  # a served model: its own answers, λ = 1
        return _measure_served(lm, jobs, options)
    parts = _example_parts(lm, jobs, options)
    rescored = options.ngram is not None and options.bounded_eps is None
    caches: list[Any] | None = [] if hand_over_prefill and options.ngram is not None \
        and options.reuse_prefix else None
    responses = generate_cid_many(lm, [(p.full, p.empty, options.cid(setting), seed)
                                       for (p, _), (_, setting, seed) in zip(parts, jobs)],
                                  context_caches=caches, rescored=rescored)
    if options.ngram is None:
        return [_record(lm, ex, setting, options, seed, p, dropped, response) for
                (ex, setting, seed), (p, dropped), response in zip(jobs, parts, responses)]
    todo = [k for k, r in enumerate(responses) if r.response_ids]
    requests, clipped = _window_requests(jobs, parts, responses, caches, todo, options,
                                         rescored)
    scored = window_influence_many(lm, requests, reuse_prefix=options.reuse_prefix)
    if rescored:  # every float of these responses from their own window scoring
        for k, win in zip(todo, scored):
            assert win.logp_empty is not None  # rescored window requests ask for it
            responses[k] = _with_logprobs(responses[k], win.logp_context, win.logp_empty)
    records = [_record(lm, ex, setting, options, seed, p, dropped, response)
               for (ex, setting, seed), (p, dropped), response in zip(jobs, parts, responses)]
    for k in clipped:
        records[k]["ngram_clipped_from"] = options.ngram
    for k, request, win in zip(todo, requests, scored):
        records[k].update(_window_fields(request, win, options))
    return records


def _measure_served(lm: Any, jobs: Sequence[tuple[InfluenceExample, Setting, int]],
                    options: InfluenceOptions) -> list[dict[str, Any]]:
    """:func:`measure_examples` on a served model (λ = 1, T = 1, checked before the run): each
    answer sampled by the server from its own seed, then scored there
    (:mod:`ctxleak.methods.influence.served`)."""
    parts = _example_parts(lm, jobs, options)
    responses: list[tuple[list[int], bool]] = [([], False)] * len(jobs)
    for temperature in sorted({setting.temperature for _, setting, _ in jobs}):
        ks = [k for k, (_, setting, _) in enumerate(jobs) if setting.temperature == temperature]
        drawn = served_responses(lm, [parts[k][0] for k in ks], [jobs[k][2] for k in ks],
                                 temperature, options.max_new_tokens, options.min_new_tokens)
        for k, answer in zip(ks, drawn):
            responses[k] = answer
    ledgers, requests, wins, clipped = score_responses(
        lm, [p for p, _ in parts], responses, lam=[s.lam for _, s, _ in jobs],
        temperature=[s.temperature for _, s, _ in jobs],
        min_new_tokens=options.min_new_tokens, ngram=options.ngram, stride=options.stride,
        ids=[ex.id for ex, _, _ in jobs])
    records = [_record(lm, ex, setting, options, seed, p, dropped, ledger)
               for (ex, setting, seed), (p, dropped), ledger in zip(jobs, parts, ledgers)]
    for k, (request, win) in enumerate(zip(requests, wins)):
        if k in clipped:
            records[k]["ngram_clipped_from"] = options.ngram
        if request is not None and win is not None:
            records[k].update(_window_fields(request, win, options))
    return records


def _example_parts(lm: LM, jobs: Sequence[tuple[InfluenceExample, Setting, int]],
                   options: InfluenceOptions) -> list[tuple[PromptParts, int]]:
    """Each job's prompt parts and the context tokens cut to fit the window (warned)."""
    parts = []
    for example, setting, _ in jobs:
        p, dropped = example_parts(lm, example, setting, options)
        if dropped:
            warn(f"example {example.id}: context cut by {dropped} tokens to fit the "
                 "model's window")
        parts.append((p, dropped))
    return parts


def _window_requests(jobs: Sequence[tuple[InfluenceExample, Setting, int]],
                     parts: Sequence[tuple[PromptParts, int]], responses: Sequence[RowLedger],
                     caches: list[Any] | None, todo: Sequence[int], options: InfluenceOptions,
                     with_empty: bool) -> tuple[list[WindowRequest], set[int]]:
    """The n-gram scoring request of each response in ``todo`` (n clipped to the context, and
    which were clipped). Each request takes over its response's handed-over KV cache
    (``caches[k]``, when kept)."""
    assert options.ngram is not None
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
        requests.append(WindowRequest(p, response.response_ids,
                                      windows(len(p.context), n, options.stride),
                                      lam=setting.lam, temperature=setting.temperature,
                                      min_new_tokens=options.min_new_tokens,
                                      prefix_cache=caches[k] if caches else None,
                                      bounded_eps=options.bounded_eps, with_empty=with_empty))
        if caches:
            caches[k] = None  # the request holds it until scored
    return requests, clipped


def _window_fields(request: WindowRequest, win: WindowInfluence, options: InfluenceOptions
                   ) -> dict[str, Any]:
    """The n-gram fields of a record: windows, per-window influence and log-probs, the max."""
    assert options.ngram is not None
    per_window = win.per_window
    return {
        "ngram": min(options.ngram, len(request.parts.context)),
        "windows": [list(s) for s in request.spans],
        "window_influence": _round(per_window),
        "window_logp": [_round(row) for row in win.logp_ablated],
        "max_window_influence": float(per_window.max()) if len(per_window) else None,
        "max_window": int(per_window.argmax()) if len(per_window) else None,
    }


def _record(lm: LM, example: InfluenceExample, setting: Setting, options: InfluenceOptions,
            seed: int, parts: PromptParts, dropped: int, response: RowLedger
            ) -> dict[str, Any]:
    """The record of one CID response: tokens, per-token log-probs and influence (Def. 3.1-3.2),
    regurgitation and ROUGE-L, bounded-CID ε."""
    ids = response.response_ids
    text = lm.decode(ids)
    context_text = lm.decode(list(parts.context))
    record: dict[str, Any] = {
        "setting": setting.key, "lambda": setting.lam, "temperature": setting.temperature,
        "context_tokens": len(parts.context), "context_truncated_by": dropped,
        "seed": seed, "response": text, **response.response_fields(digits=6),
        "context_token_fraction": context_token_fraction(ids, parts.context),
        "repeat": is_repeat(ids, parts.context, options.repeat_threshold),
        "rouge_context": rouge_l_f1(text, context_text),
        "rouge_repeat": is_rouge_repeat(text, context_text, options.rouge_threshold),
        "rouge_l": rouge_l_f1(text, example.reference) if example.reference else None,
        # the tokens as text, so that a loaded run draws its leak map without the model
        "context_token_strings": lm.token_strings(list(parts.context)),
        "response_token_strings": lm.token_strings(ids),
    }
    # bounded CID: eps, composed_eps are the guarantee (ε per released token, basic
    # composition, paper 000 Thm B.1); the ex-post figures are about this context alone
    record.update(response.eps_fields(digits=6))
    return record


def _with_logprobs(response: RowLedger, logp_context: Iterable[float],
                   logp_empty: Iterable[float]) -> RowLedger:
    """``response`` with its response tokens' log-probabilities (and so their influence) taken
    from the example's own scoring passes; the stopping EOS's entry is kept as drawn."""
    entries = list(response.entries)
    for t, (lc, le) in enumerate(zip(logp_context, logp_empty)):
        lc, le = float(lc), float(le)
        entries[t] = replace(entries[t], logp_context=lc, logp_empty=le,
                             influence=float(token_influence(lc, le)))
    return replace(response, entries=tuple(entries))


def summarize_setting(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """The summary of one setting: expected influence with a bootstrap interval, regurgitation
    counts, ROUGE-L, the per-position curve and, for n-gram runs, the per-window curve.

    Records that do not know their context (a ledger's, :meth:`RowLedger.to_record
    <ctxleak.methods.influence.ledger.RowLedger.to_record>`) give ``None`` for the
    regurgitation counts and the mean context size."""
    infl = [r["influence"] for r in records]
    rouge = [r["rouge_l"] for r in records if r.get("rouge_l") is not None]
    first = records[0] if records else {}
    knows_context = all("context_tokens" in r for r in records)
    out: dict[str, Any] = {
        "setting": first.get("setting"), "lambda": first.get("lambda"),
        "temperature": first.get("temperature"), "n": len(records),
        "influence": expected_influence(infl, seed=seed),
        "mean_tokens": float(np.mean([len(r["response_ids"]) for r in records])) if records
        else None,
        "repeat_prompts": int(sum(r["repeat"] for r in records)) if knows_context else None,
        "rouge_prompts": int(sum(r["rouge_repeat"] for r in records)) if knows_context
        else None,
        "rouge_l": mean_with_ci(rouge, seed=seed) if rouge else None,
        "per_position_influence": mean_curve([r["token_influence"] for r in records]),
        "mean_context_tokens": float(np.mean([r["context_tokens"] for r in records]))
        if records and knows_context else None,
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

