"""How often DP-RAG's private retrieval ("RAG with Differential Privacy", Grislain) keeps at
least one document of the bundled ``demo-datastore`` (288 documents) for a question, per fact
group: exactly, not by sampling. The threshold τ is drawn from the exponential mechanism's
distribution over the public grid, and a document is kept when its word similarity is at least
τ, so a question keeps one with probability Σ P(τ) over the thresholds at or below its best
similarity (:func:`ctxleak.mitigations.dp_retrieval.retrieval_odds`). No model is loaded.

Printed per setting: the mean of that probability over the common-fact and the private-fact
questions, and the mean number of documents kept. The default is DP-RAG at ε = 5 with its
default split (``eps_retrieval = eps / 10``); other retrieval budgets and ``top_k`` beside it.

    python bench/bench_dp_retrieval.py [--eps 5]
"""

from __future__ import annotations

import argparse

from ctxleak.methods.influence.data import load_log
from ctxleak.methods.influence.mechanism_mode import resolve_datastore
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages
from ctxleak.mitigations.datastore import SIMILARITY_RANGE
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_retrieval import retrieval_odds, threshold_grid


def keep_rates(mech: DPRAG, similarities: list[list[float]]) -> tuple[float, float]:
    """The mean probability, over the questions, that the retrieval keeps at least one
    document, and the mean number it keeps (:func:`retrieval_odds`)."""
    grid = threshold_grid(*SIMILARITY_RANGE, mech.grid)
    odds = [retrieval_odds(scores, grid, mech.top_k, mech.retrieval_eps)
            for scores in similarities]
    return (sum(o[0] for o in odds) / len(odds), sum(o[1] for o in odds) / len(odds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eps", type=float, default=5.0, help="DP-RAG's ε per response")
    args = ap.parse_args()
    examples, _ = load_log("demo-datastore",
                           app=AppPromptChoice(load_prompt_messages("short-answer")))
    store = resolve_datastore(None, "demo-datastore", examples)
    assert store is not None
    groups = {fact: [list(store.similarities(ex.query)) for ex in examples if ex.fact == fact]
              for fact in ("common", "private")}
    print(f"DP-RAG's private retrieval over {store.describe()}; {len(groups['common'])} common "
          f"and {len(groups['private'])} private questions; exact probabilities")
    print("| setting | keeps a document: common | private | documents kept: common | private |")
    print("|---|---|---|---|---|")
    eps = args.eps
    for extra in ({}, {"eps_retrieval": eps / 5}, {"eps_retrieval": 2 * eps / 5},
                  {"top_k": 8}):
        mech = DPRAG(eps=eps, **extra)
        (c_keep, c_kept), (p_keep, p_kept) = (keep_rates(mech, groups[f])
                                              for f in ("common", "private"))
        label = f"ε = {eps:g}, eps_retrieval = {mech.retrieval_eps:g}, top_k = {mech.top_k}"
        print(f"| {label} | {c_keep:.1%} | {p_keep:.1%} | {c_kept:.2f} | {p_kept:.2f} |")


if __name__ == "__main__":
    main()
