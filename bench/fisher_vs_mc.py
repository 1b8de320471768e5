"""Does Fisher susceptibility track Monte Carlo susceptibility? ("Efficiently Computing
Susceptibility to Context in Language Models", Table 1: Pearson / Spearman of χ_F against χ_MC
per query, overall and for open and closed queries.)

For each chat-template setting, a stratified seeded subset of the demo queries (equal numbers of
closed, open question-answering and open sentence-completion queries) gets its Monte Carlo
susceptibility exactly as ``ctxleak susceptibility --method mc`` computes it, and one gradient
call per query: the top-``k`` next-token log-probabilities differentiated with respect to the
input embeddings of every position of the context-free prompt. The Fisher settings compared are
then read off the same gradients:

* ``query``: tr I over the query's own token embeddings (the reading ``ctxleak`` has used);
* ``query/token``: the same, divided by the query's number of tokens (a mean over positions);
* ``last``: the last prompt position only (where the next token is read);
* ``all``: every position, BOS and template included;
* each at top-k = 10 (paper 002 Eq. 11) and at a larger k, with the top-k probabilities as
  they are (``raw``, the partial sum Σ p(a)·‖∇ log p(a)‖²) or renormalised to sum to 1 (the
  Fisher information of the truncated distribution, ``ctxleak``'s default).

σ² only scales χ_F (Eq. 10), so it changes no correlation and is not varied.

    python bench/fisher_vs_mc.py [--queries 90] [--contexts 32] [--chat off,on] [--k 10,50]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Sequence

import numpy as np
import torch

from ctxleak.engine.gradients import next_token_embedding_grads_many
from ctxleak.engine.models import load_model
from ctxleak.methods.susceptibility import SusceptibilityOptions, build_queries, load_relations
from ctxleak.methods.susceptibility.data import QUERY_TYPES, Query
from ctxleak.methods.susceptibility.fisher import query_prompt
from ctxleak.methods.susceptibility.pipeline import correlation, measure_queries

SPANS = ("query", "query/token", "last", "all")
TRUNCATIONS = ("raw", "renormalised")
PAPER = "paper 002 Table 1, 14 models: overall Pearson 0.43-0.70, Spearman 0.56-0.77 " \
        "(Pythia-160m 0.51 / 0.63); open 0.27-0.66 / 0.37-0.78; closed 0.20-0.40 / 0.18-0.47"


def pick_queries(n: int, seed: int) -> list[Query]:
    """``n`` demo queries, a third of each query type, drawn with a seeded generator."""
    queries = build_queries(load_relations("demo"), list(QUERY_TYPES))
    rng = np.random.default_rng(seed)
    out: list[Query] = []
    for t in QUERY_TYPES:
        pool = [q for q in queries if q.query_type == t]
        keep = sorted(rng.choice(len(pool), size=min(n // len(QUERY_TYPES), len(pool)),
                                 replace=False).tolist())
        out += [pool[i] for i in keep]
    return out


def gradient_terms(lm, texts: Sequence[str], ks: Sequence[int], batch: int = 16) -> list[dict]:
    """Per query: p(a) of the top-k tokens and, per top-k size and truncation, the squared
    gradient norms per token a and position i (float64), with the query's span; queries batched
    as ``ctxleak susceptibility`` batches its Fisher forward and backward passes."""
    out = []
    for lo in range(0, len(texts), batch):
        prompts = [query_prompt(lm, t) for t in texts[lo:lo + batch]]
        many = next_token_embedding_grads_many(lm, [p.ids for p in prompts],
                                               [(0, len(p.ids)) for p in prompts], top_k=max(ks))
        for p, res in zip(prompts, many):
            probs, g = res.logprobs.double().exp(), res.grads.double()  # [K], [K, L, d]
            sq = {("raw", k): (g[:k] ** 2).sum(dim=-1).numpy() for k in ks}
            for k in ks:  # ∇ log p̃ = g_a − Σ_b p̃(b)·g_b over the renormalised top-k
                w = probs[:k] / probs[:k].sum()
                centred = g[:k] - (w[:, None, None] * g[:k]).sum(dim=0)
                sq["renormalised", k] = (centred ** 2).sum(dim=-1).numpy()
            out.append({"probs": probs.numpy(), "sq": sq, "span": p.spans["query"],
                        "n": len(p.ids)})
    return out


def fisher_value(terms: dict, span: str, k: int, truncation: str) -> float:
    """½·tr I (σ² = 1) over the positions of ``span`` and the top ``k`` tokens."""
    start, end = terms["span"]
    cols = {"query": slice(start, end), "query/token": slice(start, end),
            "last": slice(terms["n"] - 1, terms["n"]), "all": slice(0, terms["n"])}[span]
    p = terms["probs"][:k]
    if truncation == "renormalised":
        p = p / p.sum()
    trace = float((p * terms["sq"][truncation, k][:, cols].sum(axis=1)).sum())
    if span == "query/token":
        trace /= end - start
    return 0.5 * trace


def fmt(c: dict) -> str:
    if c["pearson"] is None:
        return "   n/a /   n/a"
    return f"{c['pearson']['r']:+.2f} / {c['spearman']['r']:+.2f}"


def run_setting(chat: str, queries: Sequence[Query], contexts: int, ks: Sequence[int],
                seed: int, raw: list[dict]) -> list[dict]:
    lm = load_model("default", chat_template=chat)
    rels = load_relations("demo")
    options = SusceptibilityOptions(method="mc", n_contexts=contexts,
                                    sampling="no-replacement").validate()
    t0 = time.perf_counter()
    records = measure_queries(lm, [(q, seed + q.index) for q in queries], rels, options)
    t_mc = time.perf_counter() - t0
    t0 = time.perf_counter()
    terms = gradient_terms(lm, [q.text for q in queries], ks)
    t_f = time.perf_counter() - t0
    print(f"# chat template {chat}: {len(queries)} queries, Monte Carlo {t_mc:.0f} s, "
          f"gradients (top-{max(ks)}, every position) {t_f:.0f} s", flush=True)
    raw += [{"chat": chat, "id": q.id, "query_type": q.query_type, "chi_mc": r["chi_mc"]}
            for q, r in zip(queries, records)]
    rows = []
    for k, truncation, span in itertools.product(ks, TRUNCATIONS, SPANS):
        chi_f = [fisher_value(t, span, k, truncation) for t in terms]
        row = {"chat": chat, "k": k, "truncation": truncation, "span": span}
        for group, keep in (("overall", lambda q: True), ("open", lambda q: q.is_open),
                            ("closed", lambda q: not q.is_open)):
            idx = [i for i, q in enumerate(queries) if keep(q)]
            row[group] = correlation([records[i]["chi_mc"] for i in idx],
                                     [chi_f[i] for i in idx])
        row["mean_chi_f"] = {g: float(np.mean([chi_f[i] for i, q in enumerate(queries)
                                               if q.is_open == (g == "open")]))
                             for g in ("open", "closed")}
        rows.append(row)
    mc_means = {g: float(np.mean([r["chi_mc"] for r, q in zip(records, queries)
                                  if q.is_open == (g == "open")])) for g in ("open", "closed")}
    for row in rows:
        row["mean_chi_mc"] = mc_means
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=90, help="queries (a third per type)")
    parser.add_argument("--contexts", type=int, default=32, help="Monte Carlo contexts / query")
    parser.add_argument("--chat", default="off,on", help="chat-template settings to compare")
    parser.add_argument("--k", default="10,50", help="top-k values (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the rows and per-query χ_MC here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ks = sorted(int(k) for k in args.k.split(","))
    queries = pick_queries(args.queries, args.seed)
    rows: list[dict] = []
    raw: list[dict] = []
    for chat in args.chat.split(","):
        rows += run_setting(chat, queries, args.contexts, ks, args.seed, raw)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump({"rows": rows, "queries": raw}, fh)
    print(f"\nPearson / Spearman of χ_F against χ_MC ({args.contexts} contexts, no replacement; "
          f"{len(queries)} queries; mean χ in nats)")
    print(f"{'chat':5} {'k':>3} {'top-k':13} {'positions':12} {'overall':>15} {'open':>15} {'closed':>15}"
          f"  {'χ_F open/closed':>17}  {'χ_MC open/closed':>17}")
    for r in rows:
        print(f"{r['chat']:5} {r['k']:>3} {r['truncation']:13} {r['span']:12} "
              f"{fmt(r['overall']):>15} "
              f"{fmt(r['open']):>15} {fmt(r['closed']):>15}  "
              f"{r['mean_chi_f']['open']:8.3f}/{r['mean_chi_f']['closed']:<8.3f} "
              f"{r['mean_chi_mc']['open']:8.3f}/{r['mean_chi_mc']['closed']:<8.3f}")
    print(PAPER)


if __name__ == "__main__":
    main()
