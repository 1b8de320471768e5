"""``ctxleak susceptibility``: Monte Carlo and Fisher susceptibility to context (Efficiently
Computing Susceptibility to Context in Language Models, Du et al. 2024)."""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, with_common_options


@with_common_options
def susceptibility(
    data: str = typer.Option("demo", "--data", "-d", help="Relations JSON: ctxleak's format "
                             "({\"relations\": [...]}), Du et al.'s yago_qec.json, or 'demo' "
                             "(10 bundled relations)."),
    method: str = typer.Option("both", "--method", help="mc (Monte Carlo, Du et al.), fisher "
                               "(Fisher, from Efficiently Computing Susceptibility to Context in "
                               "Language Models) or both (also their correlation)."),
    contexts: int = typer.Option(256, "--contexts", "-n", help="Contexts drawn per query for "
                                 "Monte Carlo (the Fisher susceptibility paper, §5.1: 256; 128 for "
                                 "LLaMA-size models). "
                                 "256 takes tens of seconds per query on a 2-core CPU with the "
                                 "default model; 32 a few seconds."),
    entity_contexts: Optional[int] = typer.Option(
        None, "--entity-contexts", help="With --context-entities mix: how many of the --contexts "
        "mention the queried entity; the rest are the relation's contexts about other entities. "
        "Default: the paper's ratio, 1/32 of --contexts (8 of 256, 4 of 128), at least 1."),
    top_k: int = typer.Option(10, "--top-k", help="Next tokens in the Fisher trace (Eq. 11)."),
    sigma2: float = typer.Option(1.0, "--sigma2", help="Variance σ² of the context perturbation "
                                 "(χ_F = ½σ²·tr I)."),
    reference: str = typer.Option("marginal", "--reference", help="marginal (p̄ = Σ p̂(c)·p(·|c,q): "
                                  "χ is the mutual information) or no-context (KL from p(·|q))."),
    query_types: str = typer.Option("closed,open_qa,open_completion", "--query-types",
                                    help="Comma list of closed, open_qa, open_completion "
                                    "('open' = both open forms)."),
    fisher_vocab: str = typer.Option("topk", "--fisher-vocab", help="topk, or full: the exact "
                                     "trace over the whole vocabulary (V backward products; "
                                     "small models only)."),
    fisher_truncation: str = typer.Option(
        "renormalised", "--fisher-truncation", help="renormalised (the Fisher information of "
        "the top-k distribution renormalised to sum to 1; tracks Monte Carlo better on the "
        "default model) or raw (the plain top-k partial sum Σ p(a)·‖∇ log p(a)‖²)."),
    context_entities: str = typer.Option("mix", "--context-entities", help="Entities in the "
                                         "contexts: mix (the Fisher susceptibility paper, "
                                         "§5.1: --entity-contexts "
                                         "about the query's entity, the rest about the "
                                         "relation's other entities), query (only the query's "
                                         "own entity with every answer; the default before "
                                         "the mix), relation (every entity of the relation, "
                                         "uniformly, as Du et al.) or all (every relation's)."),
    sampling: str = typer.Option("no-replacement", "--sampling", help="no-replacement (as in "
                                 "Efficiently Computing Susceptibility to Context in Language "
                                 "Models, §5.1, and Du et al.: each pool subsampled, capped at "
                                 "its size) or replacement (i.i.d. draws; repeats weighted by "
                                 "count)."),
    relations: Optional[str] = typer.Option(None, "--relations", help="Only these relations "
                                            "(comma list of names)."),
    entities_per_relation: Optional[int] = typer.Option(
        None, "--entities-per-relation", help="At most this many real and this many made-up "
        "entities per relation (seeded sample; the paper uses 50 + 50)."),
    *,
    common: CommonOptions,
) -> None:
    """Susceptibility of each query to context: χ_MC = Σ_c p̂(c)·KL(p(·|c,q) ‖ p̄(·|q)) over
    sampled contexts, and χ_F = ½σ²·Σ_top-k p(a|e)·‖∇_e log p(a|e)‖² from one forward pass and
    batched gradients; their correlation, open vs closed, real vs made-up, and the time each
    takes (Efficiently Computing Susceptibility to Context in Language Models).

    Example:  ctxleak susceptibility --data demo --limit 6 --contexts 32 --output runs/susc
    """
    from ctxleak.api import run_params
    from ctxleak.cli.output import show
    from ctxleak.methods.susceptibility.method import SusceptibilityParams

    params = SusceptibilityParams(method=method, contexts=contexts, top_k=top_k, sigma2=sigma2,
                                  reference=reference, query_types=query_types,
                                  fisher_vocab=fisher_vocab, fisher_truncation=fisher_truncation,
                                  context_entities=context_entities,
                                  entity_contexts=entity_contexts, sampling=sampling,
                                  relations=relations, entities_per_relation=entities_per_relation)
    result = run_params(params, common, data)
    show(result)


def register(app: typer.Typer) -> None:
    app.command("susceptibility")(susceptibility)
