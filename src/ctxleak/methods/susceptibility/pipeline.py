"""Susceptibility over a set of queries (Efficiently Computing Susceptibility to Context in Language
Models §5): χ_MC and χ_F per query, their correlation overall and by query type, open against closed
and real against made-up entities, per-relation means, the time each method takes, plots and the
report."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from ctxleak.engine.forward import PrefixKV
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, warn
from ctxleak.methods.susceptibility.contexts import (
    CONTEXT_SCOPES,
    check_context_mix,
    query_contexts,
)
from ctxleak.methods.susceptibility.data import (
    QUERY_TYPES,
    Query,
    Relation,
)
from ctxleak.methods.susceptibility.fisher import (
    FISHER_TRUNCATIONS,
    FISHER_VOCABS,
    fisher_susceptibility_many,
)
from ctxleak.methods.susceptibility.montecarlo import (
    PROMPT_TEMPLATE,
    REFERENCES,
    monte_carlo_many,
)

METHODS = ("mc", "fisher", "both")
SAMPLING = ("replacement", "no-replacement")
TYPE_LABELS = {"closed": "closed", "open_qa": "open (question answering)",
               "open_completion": "open (sentence completion)"}


# §5.1: 8 of the 256 contexts of a query mention its entity (4 of 128 for LLaMA)
PAPER_CONTEXTS, PAPER_ENTITY_CONTEXTS = 256, 8
# Fisher is read as an estimate of Monte Carlo susceptibility only where their per-query
# Spearman correlation over at least AGREEMENT_MIN_QUERIES queries reaches AGREEMENT_SPEARMAN
# (Table 1: 0.56-0.77 overall over 14 models; a null correlation's 95 % band at 20
# queries is about ±0.44)
AGREEMENT_SPEARMAN, AGREEMENT_MIN_QUERIES = 0.3, 20


@dataclass(frozen=True)
class SusceptibilityOptions:
    """Settings of a run (defaults: the paper's §5.1): 256 contexts per query, 8 of
    which mention the queried entity and the rest the relation's other entities
    (``context_entities="mix"``; 128 and 4 for LLaMA-size models). ``entity_contexts=None``
    takes the paper's ratio, 1/32 of ``n_contexts`` rounded, at least 1 (8 of 256, 4 of 128);
    :meth:`validate` returns the options with it resolved. ``context_entities="query"`` draws
    every context from the queried entity's own (ctxleak's default before the mix).
    ``sampling="no-replacement"`` (default) subsamples each pool without replacement, as paper
    002 §5.1 and Du et al. do (a pool smaller than its share of the draws gives all of its
    contexts once); ``"replacement"`` draws i.i.d. and weights repeats by their count."""

    method: str = "both"
    n_contexts: int = 256
    top_k: int = 10
    sigma2: float = 1.0
    reference: str = "marginal"
    fisher_vocab: str = "topk"
    fisher_truncation: str = "renormalised"
    context_entities: str = "mix"
    entity_contexts: int | None = None
    sampling: str = "no-replacement"
    template: str = PROMPT_TEMPLATE
    reuse_prefix: bool = True
    top_contexts: int = 3

    @property
    def run_mc(self) -> bool:
        return self.method in ("mc", "both")

    @property
    def run_fisher(self) -> bool:
        return self.method in ("fisher", "both")

    @property
    def mc_key(self) -> str:
        """``chi_mc`` (marginal reference: the mutual information) or ``chi_mc_nocontext``."""
        return "chi_mc" if self.reference == "marginal" else "chi_mc_nocontext"

    def validate(self) -> SusceptibilityOptions:
        def one_of(param: str, value: str, allowed: Sequence[str]) -> None:
            if value not in allowed:
                raise ConfigError(f"{param} must be one of {', '.join(allowed)}, not '{value}'",
                                  param=param)

        one_of("method", self.method, METHODS)
        one_of("reference", self.reference, REFERENCES)
        one_of("fisher_vocab", self.fisher_vocab, FISHER_VOCABS)
        one_of("fisher_truncation", self.fisher_truncation, FISHER_TRUNCATIONS)
        one_of("context_entities", self.context_entities, CONTEXT_SCOPES)
        one_of("sampling", self.sampling, SAMPLING)
        if self.n_contexts < 1:
            raise ConfigError(f"contexts must be at least 1, got {self.n_contexts}",
                              param="contexts")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be at least 1, got {self.top_k}", param="top_k")
        if not (self.sigma2 > 0 and math.isfinite(self.sigma2)):
            raise ConfigError(f"sigma2 must be a positive number, got {self.sigma2}",
                              param="sigma2")
        if self.context_entities != "mix":
            return self
        check_context_mix(self.n_contexts, self.entity_draws)
        return replace(self, entity_contexts=self.entity_draws)

    @property
    def entity_draws(self) -> int:
        """How many of a query's contexts mention its entity (``context_entities="mix"``)."""
        if self.entity_contexts is not None:
            return self.entity_contexts
        return max(1, round(self.n_contexts * PAPER_ENTITY_CONTEXTS / PAPER_CONTEXTS))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _token(lm: LanguageModel, token_id: int) -> str:
    return lm.token_strings([int(token_id)])[0]


def measure_query(lm: LanguageModel, query: Query, relations: Sequence[Relation],
                  options: SusceptibilityOptions, seed: int,
                  prefix_kv: PrefixKV | None = None) -> dict[str, Any]:
    """χ_MC and/or χ_F of one query, with the most persuasive contexts and the seconds each
    method took (one JSON record for ``samples.jsonl``). ``prefix_kv``: one store for all the
    queries of a run (see :func:`fisher_susceptibility`).

    The Monte Carlo sample is recorded in full: ``context_draws`` holds, for each distinct
    context in the order scored, its ``pool_index`` in the query's context pool
    (:func:`~ctxleak.methods.susceptibility.contexts.query_pools`) and its ``count`` (times
    drawn; p̂ = count / ``n_draws``), so χ_MC can be recomputed from the record and the relations
    alone (:func:`~ctxleak.methods.susceptibility.contexts.recorded_contexts`)."""
    return measure_queries(lm, [(query, seed)], relations, options, prefix_kv)[0]


def measure_queries(lm: LanguageModel, queries: Sequence[tuple[Query, int]], relations: Sequence[Relation],
                    options: SusceptibilityOptions, prefix_kv: PrefixKV | None = None
                    ) -> list[dict[str, Any]]:
    """:func:`measure_query` of several (query, seed) together: the Monte Carlo prompts of all of
    them in one planner run, their Fisher forward passes and vector-Jacobian products in one
    batch. The seconds of each method are the batch's time divided by its queries."""
    records: list[dict[str, Any]] = [{
        "relation": q.relation, "entity": q.entity, "real": q.is_real,
        "entity_kind": "real" if q.is_real else "fake", "query_type": q.query_type,
        "open": q.is_open, "query": q.text, "answer": q.answer, "seed": seed,
    } for q, seed in queries]
    if options.run_mc:
        _add_monte_carlo(lm, queries, relations, options, records)
    if options.run_fisher:
        _add_fisher(lm, [q.text for q, _ in queries], options, prefix_kv, records)
    return records


def _add_monte_carlo(lm: LanguageModel, queries: Sequence[tuple[Query, int]],
                     relations: Sequence[Relation], options: SusceptibilityOptions,
                     records: list[dict[str, Any]]) -> None:
    """χ_MC of each query (Du et al. 2024) into its record: each query's contexts drawn from
    its seed (§5.1), all of them scored in one planner run, then what was drawn and the most
    persuasive contexts."""
    t0 = time.perf_counter()
    drawn = [query_contexts(q, relations, options.n_contexts, np.random.default_rng(seed),
                            scope=options.context_entities, entity_contexts=options.entity_draws,
                            replace=options.sampling == "replacement")  # §5.1
             for q, seed in queries]
    results = monte_carlo_many(lm, [(q.text, d.sample.texts, d.sample.counts)
                                    for (q, _), d in zip(queries, drawn)],
                               reference=options.reference, template=options.template,
                               reuse_prefix=options.reuse_prefix)
    seconds = (time.perf_counter() - t0) / max(len(queries), 1)
    for (q, _), record, res, contexts in zip(queries, records, results, drawn):
        sample, own = contexts.sample, set(contexts.entity_pool)
        cut = [c for c in res.context_tokens_cut if c]
        if cut:
            warn(f"query {q.id}: {len(cut)} context(s) cut by up to {max(cut)} "
                 "tokens to fit the model's window")
        order = np.argsort(-res.psi, kind="stable")[:options.top_contexts]
        ref = res.ref_logprobs.numpy()
        ref_top = np.argsort(-ref, kind="stable")[:5]
        record.update({
            options.mc_key: res.chi, "reference": options.reference,
            "n_draws": sample.n_draws, "n_distinct_contexts": len(sample.texts),
            "n_entity_draws": int(sum(c for t, c in zip(sample.texts, sample.counts)
                                      if t in own)),
            "context_pool_size": len(contexts.pool), "seconds_mc": seconds,
            "context_draws": {"pool_index": contexts.pool_indices,
                              "count": [int(c) for c in sample.counts]},
            "contexts_truncated": len(cut), "context_tokens_cut": int(sum(cut)),
            "persuasive_contexts": [{"context": sample.texts[i], "psi": float(res.psi[i]),
                                     "weight": float(res.weights[i])} for i in order],
            "reference_top_tokens": [{"token": _token(lm, t), "id": int(t),
                                      "prob": float(np.exp(ref[t]))}
                                     for t in ref_top],
            # H(p̄(·|q)) in nats, the ceiling of the mutual information χ_MC
            "answer_entropy": answer_entropy(ref) if options.reference == "marginal"
            else None,
        })


def _add_fisher(lm: LanguageModel, texts: list[str], options: SusceptibilityOptions,
                prefix_kv: PrefixKV | None, records: list[dict[str, Any]]) -> None:
    """χ_F of each query (Eq. 10-11) into its record: the forward passes and vector-Jacobian
    products of all of them in one batch."""
    t0 = time.perf_counter()
    fisher = fisher_susceptibility_many(lm, texts,
                                        top_k=options.top_k, sigma2=options.sigma2,
                                        vocab=options.fisher_vocab,
                                        template=options.template, prefix_kv=prefix_kv,
                                        truncation=options.fisher_truncation)
    seconds = (time.perf_counter() - t0) / max(len(texts), 1)
    for record, fr in zip(records, fisher):
        record.update({
            "chi_f": fr.chi, "fisher_trace": fr.trace, "sigma2": fr.sigma2,
            "fisher_vocab": fr.vocab, "fisher_truncation": fr.truncation,
            "fisher_mass": fr.mass,
            "n_query_tokens": fr.n_query_tokens, "seconds_fisher": seconds,
            "fisher_top_tokens": [{"token": _token(lm, t), "id": t, "prob": p,
                                   "grad_sq_norm": s}
                                  for t, p, s in zip(fr.token_ids, fr.probs, fr.sq_norms)],
        })


# ---------------------------------------------------------------------------------------------
# summary


def correlation(x: Sequence[float | None], y: Sequence[float | None], unit: str = "queries"
                ) -> dict[str, Any]:
    """Pearson and Spearman correlation (scipy) with p-values; ``null`` and the reason when they
    are undefined (fewer than 3 pairs, or constant values)."""
    pairs = [(a, b) for a, b in zip(x, y) if a is not None and b is not None
             and math.isfinite(a) and math.isfinite(b)]
    out: dict[str, Any] = {"n": len(pairs), "pearson": None, "spearman": None}
    if len(pairs) < 3:
        out["reason"] = f"fewer than 3 {unit}"
        return out
    xs, ys = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    if np.ptp(xs) == 0 or np.ptp(ys) == 0:
        out["reason"] = "constant values"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pr, sr = stats.pearsonr(xs, ys), stats.spearmanr(xs, ys)
    out["pearson"] = {"r": float(pr.statistic), "p": float(pr.pvalue)}
    out["spearman"] = {"r": float(sr.statistic), "p": float(sr.pvalue)}
    return out


def _stats(values: Sequence[float | None]) -> dict[str, Any] | None:
    vals = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if vals.size == 0:
        return None
    std = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    return {"n": int(vals.size), "mean": float(vals.mean()), "median": float(np.median(vals)),
            "std": std, "sem": std / math.sqrt(vals.size)}


def group_means(records: Sequence[dict[str, Any]], keys: Sequence[str],
                 group: Callable[[dict[str, Any]], str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(group(r), []).append(r)
    return {g: {k: _stats([r.get(k) for r in rows]) for k in keys} | {"n": len(rows)}
            for g, rows in groups.items()}


def summarize_queries(records: Sequence[dict[str, Any]], options: SusceptibilityOptions
                      ) -> dict[str, Any]:
    """The run summary: statistics of each method, correlations, group means and timing."""
    mc, fk = options.mc_key, "chi_f"
    keys = [k for k, on in ((mc, options.run_mc), (fk, options.run_fisher)) if on]
    out: dict[str, Any] = {"n_queries": len(records), "method": options.method,
                           "reference": options.reference,
                           "metrics": {k: _stats([r.get(k) for r in records]) for k in keys}}
    if options.run_mc and options.run_fisher:
        def corr(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
            return correlation([r.get(mc) for r in rows], [r.get(fk) for r in rows])

        present = [t for t in QUERY_TYPES if any(r["query_type"] == t for r in records)]
        out["correlation"] = {
            "overall": corr(records),
            "by_query_type": {t: corr([r for r in records if r["query_type"] == t])
                              for t in present},
            "open": corr([r for r in records if r["open"]]),
            "closed": corr([r for r in records if not r["open"]]),
            "by_relation_means": _relation_mean_correlation(records, mc, fk),
        }
        out["agreement"] = fisher_agreement(out["correlation"]["overall"])
    out["means"] = {
        "by_query_type": group_means(records, keys, lambda r: r["query_type"]),
        "open_vs_closed": group_means(records, keys,
                                       lambda r: "open" if r["open"] else "closed"),
        "real_vs_fake": group_means(records, keys, lambda r: r["entity_kind"]),
        "by_relation": group_means(records, keys, lambda r: r["relation"]),
    }
    timing: dict[str, Any] = {}
    if options.run_mc:
        timing["seconds_per_query_mc"] = _mean([r.get("seconds_mc") for r in records])
        timing["mean_distinct_contexts"] = _mean([r.get("n_distinct_contexts") for r in records])
        timing["draws_per_query"] = options.n_contexts
        out["context_mix"] = context_mix(records, options)
    if options.run_fisher:
        timing["seconds_per_query_fisher"] = _mean([r.get("seconds_fisher") for r in records])
    if options.run_mc and options.run_fisher:
        a, b = timing["seconds_per_query_mc"], timing["seconds_per_query_fisher"]
        timing["speedup_fisher_over_mc"] = a / b if a is not None and b else None
    out["timing"] = timing
    if options.run_mc:  # contexts cut to the model's window
        out["truncation"] = truncation_counts(records)
    return out


def fisher_agreement(overall: dict[str, Any]) -> dict[str, Any]:
    """Whether χ_F tracks χ_MC in this run: ``agrees`` is False, with a one-line ``warning``,
    when the overall Spearman correlation over at least ``AGREEMENT_MIN_QUERIES`` queries is
    below ``AGREEMENT_SPEARMAN`` ("Efficiently Computing Susceptibility to Context in Language
    Models", Table 1, reports 0.56-0.77); None (no verdict) with fewer queries or no
    correlation."""
    rho = (overall.get("spearman") or {}).get("r")
    out: dict[str, Any] = {"spearman": rho, "n": overall.get("n"),
                           "threshold": AGREEMENT_SPEARMAN, "min_queries": AGREEMENT_MIN_QUERIES,
                           "agrees": None, "warning": None}
    if rho is None or (overall.get("n") or 0) < AGREEMENT_MIN_QUERIES:
        return out
    out["agrees"] = rho >= AGREEMENT_SPEARMAN
    if not out["agrees"]:
        out["warning"] = (f"Fisher susceptibility does not track Monte Carlo susceptibility in "
                          f"this run: Spearman ρ = {rho:.2f} over {overall['n']} queries, below "
                          f"{AGREEMENT_SPEARMAN} (the paper reports 0.56-0.77); read χ_F as a "
                          "gradient-size score, not an estimate of χ_MC (with a chat model, "
                          "chat_template='off', the default here, is the setting where they "
                          "agree best: see the README).")
    return out


def truncation_counts(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many queries had contexts cut to fit the window, how many contexts, how many
    tokens in all (from each record's ``contexts_truncated`` / ``context_tokens_cut``)."""
    return {"queries": sum(1 for r in records if r.get("contexts_truncated")),
            "contexts": int(sum(r.get("contexts_truncated") or 0 for r in records)),
            "tokens": int(sum(r.get("context_tokens_cut") or 0 for r in records))}


def context_mix(records: Sequence[dict[str, Any]],
                options: SusceptibilityOptions) -> dict[str, Any]:
    """The Monte Carlo context sample as asked and as drawn (§5.1): contexts per query,
    how many mention the queried entity, and the means actually drawn and distinct."""
    mix: dict[str, Any] = {"scope": options.context_entities, "contexts": options.n_contexts,
                           "sampling": options.sampling}
    if options.context_entities == "mix":
        mix.update(entity_contexts=options.entity_draws,
                   other_contexts=options.n_contexts - options.entity_draws)
    mix.update(mean_draws=_mean([r.get("n_draws") for r in records]),
               mean_entity_draws=_mean([r.get("n_entity_draws") for r in records]),
               mean_distinct_contexts=_mean([r.get("n_distinct_contexts") for r in records]))
    return mix


def _relation_mean_correlation(records: Sequence[dict[str, Any]], mc: str, fk: str
                               ) -> dict[str, Any]:
    """Correlation of the per-relation means (the paper's corpus-level comparison, Fig. 1)."""
    means = group_means(records, [mc, fk], lambda r: r["relation"])
    xs = [m[mc]["mean"] if m[mc] else None for m in means.values()]
    ys = [m[fk]["mean"] if m[fk] else None for m in means.values()]
    return correlation(xs, ys, unit="relations")


def answer_entropy(logprobs: np.ndarray) -> float:
    """``H(A) = -Σ_a p(a)·log p(a)`` (nats) of a log-distribution over the vocabulary (float64;
    zero probabilities contribute nothing): with the marginal p̄(·|q), the ceiling of the mutual
    information of context and answer, ``χ_MC = I(C; A | q) <= H(A | q)``."""
    lp = np.asarray(logprobs, dtype=np.float64)
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):  # 0 · -inf where a token is impossible: left out
        return float(-np.sum(np.where(p > 0, p * lp, 0.0)))


def _mean(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
