"""``ctxleak susceptibility``: Monte Carlo and Fisher susceptibility to context (paper 002,
Du et al. 2024; SPEC §6)."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ctxleak.cli.options import CommonOptions, with_common_options
from ctxleak.cli.session import format_cell


@with_common_options
def susceptibility(
    data: str = typer.Option("demo", "--data", "-d", help="Relations JSON: ctxleak's format "
                             "({\"relations\": [...]}), Du et al.'s yago_qec.json, or 'demo' "
                             "(10 bundled relations)."),
    method: str = typer.Option("both", "--method", help="mc (Monte Carlo, Du et al.), fisher "
                               "(Fisher, paper 002) or both (also their correlation)."),
    contexts: int = typer.Option(256, "--contexts", "-n", help="Contexts drawn per query for "
                                 "Monte Carlo (paper 002 §5.1: 256; 128 for LLaMA-size models). "
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
    context_entities: str = typer.Option("mix", "--context-entities", help="Entities in the "
                                         "contexts: mix (paper 002 §5.1: --entity-contexts "
                                         "about the query's entity, the rest about the "
                                         "relation's other entities), query (only the query's "
                                         "own entity with every answer; the default before "
                                         "the mix), relation (every entity of the relation, "
                                         "uniformly, as Du et al.) or all (every relation's)."),
    sampling: str = typer.Option("replacement", "--sampling", help="replacement (i.i.d. draws; "
                                 "duplicates weighted by count) or no-replacement (Du et al.)."),
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
    takes.

    Example:  ctxleak susceptibility --data demo --limit 6 --contexts 32 --output runs/susc
    """
    from ctxleak.errors import ConfigError
    from ctxleak.methods.susceptibility.data import (
        build_queries,
        load_relations,
        parse_query_types,
        resolve_data_path,
    )
    from ctxleak.methods.susceptibility.pipeline import SusceptibilityOptions

    options = SusceptibilityOptions(
        method=method, n_contexts=contexts, top_k=top_k, sigma2=sigma2, reference=reference,
        fisher_vocab=fisher_vocab, context_entities=context_entities,
        entity_contexts=entity_contexts, sampling=sampling,
    ).validate()
    types = parse_query_types(query_types)
    if entities_per_relation is not None and entities_per_relation < 1:
        raise ConfigError(f"--entities-per-relation must be at least 1, got "
                          f"{entities_per_relation}")
    rels = load_relations(data)
    if relations is not None:
        wanted = [r.strip() for r in relations.split(",") if r.strip()]
        if not wanted:
            raise ConfigError("--relations needs at least one relation name")
        unknown = [w for w in wanted if w not in {r.name for r in rels}]
        if unknown:
            raise ConfigError(f"--relations: unknown relation(s) {', '.join(unknown)}; the file "
                              f"has {', '.join(r.name for r in rels)}")
        rels = [r for r in rels if r.name in wanted]
    queries = build_queries(rels, types, entities_per_relation, seed=common.seed)
    if not queries:
        raise ConfigError(f"no queries of type {', '.join(types)} in {resolve_data_path(data)}")
    if common.limit is not None:
        queries = queries[:common.limit]
    settings = options.to_dict()
    settings["contexts"] = settings.pop("n_contexts")  # stored under the flag's name
    config = {"data": data, "query_types": types, "relations": relations,
              "entities_per_relation": entities_per_relation, **settings}
    _run(common, config, options, rels, queries, data, resolve_data_path(data))


def _run(common: CommonOptions, config: dict[str, Any], options: Any, rels: list, queries: list,
         data: str, data_file: Any) -> None:
    from ctxleak.cli.session import is_main, load_lm, open_run, run_examples
    from ctxleak.engine.forward import PrefixKV
    from ctxleak.engine.generation import derive_seed
    from ctxleak.methods.susceptibility.pipeline import (
        build_report,
        make_plots,
        measure_query,
        summarize,
    )
    from ctxleak.run.provenance import provenance

    run = open_run("susceptibility", common, config, inputs={"data": data_file})
    lm = load_lm(common)
    prefix_kv = PrefixKV(lm)  # the tokens before each query, through the model once per run

    def work(_: int, query: Any) -> dict[str, Any]:
        return measure_query(lm, query, rels, options, derive_seed(common.seed, query.index),
                             common.batch_size, prefix_kv)

    with run:
        records = run_examples(run, queries, key=lambda q: q.id, work=work,
                               desc="susceptibility")
    if not is_main(run):
        return
    summary = summarize(records, options)
    pngs = make_plots(records, options)
    for name, png in pngs.items():
        run.write_file(name, png)
    prov = provenance(lm, prompt_template=options.template)
    run.write_results(summary, provenance=prov, n_effective=len(records))
    report = build_report(records, summary, options, pngs, model=lm.info.name, data=data)
    report.save(run.path / "report.html", mode=run.file_mode)
    _print_summary(summary, options, str(run.path))


def _print_summary(summary: dict[str, Any], options: Any, path: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    mc, fk = options.mc_key, "chi_f"
    table = Table(title=f"Susceptibility ({summary['n_queries']} queries)")
    table.add_column("group")
    keys = [k for k in (mc, fk) if k in summary["metrics"]]
    for k in keys:
        table.add_column(f"mean {k}", justify="right")
    groups = [("all", {k: summary["metrics"][k] for k in keys})]
    for block in ("by_query_type", "real_vs_fake"):
        groups += list(summary["means"][block].items())
    for name, stats in groups:
        table.add_row(name, *[format_cell((stats.get(k) or {}).get("mean")) for k in keys])
    console.print(table)
    corr = summary.get("correlation")
    if corr:
        ct = Table(title="Correlation of χ_F with χ_MC")
        for col in ("group", "n", "Pearson r", "Spearman ρ"):
            ct.add_column(col, justify="right" if col != "group" else "left")
        rows = [("overall", corr["overall"])] + list(corr["by_query_type"].items())
        for name, c in rows:
            ct.add_row(name, str(c["n"]), format_cell((c.get("pearson") or {}).get("r")),
                       format_cell((c.get("spearman") or {}).get("r")))
        console.print(ct)
    t = summary.get("timing", {})
    parts = []
    if "seconds_per_query_mc" in t:
        parts.append(f"Monte Carlo {format_cell(t['seconds_per_query_mc'])} s/query "
                     f"({format_cell(t.get('mean_distinct_contexts'))} distinct of {t['draws_per_query']} "
                     "drawn contexts)")
    if "seconds_per_query_fisher" in t:
        parts.append(f"Fisher {format_cell(t['seconds_per_query_fisher'])} s/query")
    if t.get("speedup_fisher_over_mc"):
        parts.append(f"speedup {t['speedup_fisher_over_mc']:.1f}x")
    console.print("time: " + ", ".join(parts))
    console.print(f"results: {path}/results.json   report: {path}/report.html")


def register(app: typer.Typer) -> None:
    app.command("susceptibility")(susceptibility)
