"""``ctxleak influence``: context influence of a dataset under CID, and ``influence explain``."""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, api_options, generation_option, with_common_options

#: The exit status when a document is over its budget (--exposure-budget, --class-budget,
#: --document-budget).
OVER_BUDGET = 3

influence_app = typer.Typer(help="Context influence (Estimating Privacy Leakage of Augmented "
                            "Contextual Knowledge in Language Models): how much of each "
                            "response came from the context, under Context Influence Decoding "
                            "(CID).\n\n"
                            "Without a subcommand it measures a dataset with the options "
                            "below; 'ctxleak influence explain --help' explains one prompt "
                            "instead.\n\n"
                            "Example: ctxleak influence --data demo --limit 5 --ngram 8 "
                            "--output runs/demo\n\nAny flag can also come from "
                            "--config FILE.yaml (flags on the command line win).",
                            no_args_is_help=False, invoke_without_command=True,
                            subcommand_metavar="[explain [OPTIONS]]")


@influence_app.callback()
@with_common_options
def influence(
    ctx: typer.Context,
    data: str = typer.Option("demo", "--data", "-d", help="JSONL/CSV with context, query and "
                             "optional reference (a string or a list of acceptable answers) and id "
                             "fields, 'demo' (bundled set), 'demo-qa' (bundled questions whose "
                             "answers are only in their private document: F1 and exact match "
                             "show what lowering λ costs), or cnn_dailymail / pubmedqa (needs "
                             "the datasets package and network); with --retriever, the queries "
                             "(JSONL/CSV rows with query)."),
    retriever: Optional[str] = typer.Option(None, "--retriever", help="A RAG pipeline's "
                                            "retriever as PATH.py:NAME or module:NAME (a "
                                            "LangChain or LlamaIndex retriever, a Haystack "
                                            "component, or a function query -> documents): "
                                            "each query of --data is retrieved and every "
                                            "document measured as a passage."),
    task: str = typer.Option("auto", "--task", help="qa, summarization, custom (needs "
                             "--template) or auto (each example's 'task' field, else qa)."),
    template: Optional[str] = generation_option("--template", None,
                                                ", e.g. 'Document: {context}. {query}'."),
    fields: Optional[str] = typer.Option(None, "--fields", help="Rename file fields, e.g. "
                                         "'article=context,highlights=reference'."),
    lambda_: str = generation_option("--lambda", "1.0", " (0 = no context, 1 = plain "
                                     "decoding, >1 amplifies); a comma list sweeps."),
    temperature: Optional[str] = generation_option(
        "--temperature", None, " > 0; a comma list sweeps. Default: 0.8 in-process, 1 against a "
        "served model (its influence is measured from temperature-1 log-probs)."),
    max_new_tokens: int = generation_option("--max-new-tokens", 50, " per response."),
    min_new_tokens: Optional[int] = generation_option(
        "--min-new-tokens", None, ", in both streams (default: 10, or --max-new-tokens if smaller)."),
    ngram: str = typer.Option("full", "--ngram", help="'full' (the whole context, n = |D|) or "
                              "n: also the influence of every n-token window of the context."),
    stride: Optional[int] = typer.Option(None, "--stride", help="Window stride (default n: "
                                         "non-overlapping windows)."),
    context_sizes: Optional[str] = typer.Option(None, "--context-sizes", help="Also truncate "
                                                "contexts to their first k tokens, e.g. "
                                                "32,64,128,256 (Fig. 2b)."),
    bounded_eps: Optional[str] = typer.Option(None, "--bounded-eps", help="Bounded CID: "
                                              "ε-DP per token for any n-gram (App. B), so "
                                              "ε × tokens for a response (basic composition); "
                                              "λ becomes the upper bound λ_max. A comma list "
                                              "sweeps, combined with every λ: 'none' is plain "
                                              "CID (no bound; 'inf' the same), 0 forces λ_t = "
                                              "0 (the no-context answer), e.g. none,2,8."),
    mechanisms: list[str] = typer.Option([], "--mechanism", help="Another mechanism than "
                                         "CID as a decoding mode, scored as CID at λ = 1 "
                                         "scores an answer, beside the λ and ε settings "
                                         "(repeatable): dp-vote:eps=2,shards=4, "
                                         "dp-sparse-vote:eps=2,shards=4, dp-rag:eps=5, "
                                         "scrub:operator=replace. Each records its claimed ε, "
                                         "δ and relation and the tokens it paid; the data "
                                         "needs several documents per question for the "
                                         "votes (e.g. --data demo-qa-large)."),
    datastore: Optional[str] = typer.Option(None, "--datastore", help="What the mechanisms "
                                            "retrieve from, as their papers define it: a JSONL "
                                            "of {id, text}, or 'retrieved' for each question's "
                                            "own retrieved list. Default: the bundled set's "
                                            "datastore (demo-datastore), else every document "
                                            "the examples retrieved, pooled by id."),
    classes: Optional[str] = typer.Option(None, "--classes", help="JSONL or CSV file of rows "
                                          "with id and class (as ctxleak serve --classes "
                                          "takes), or demo-datastore (the bundled one's): "
                                          "documents of class public stay in every prompt at "
                                          "full strength, CID's prompt without the documents "
                                          "included, and are never bounded or charged; the "
                                          "mechanisms read the private ones only."),
    deployed_temperature: Optional[float] = typer.Option(
        None, "--deployed-temperature", help="The temperature the team deploys (0: greedy): "
        "the default of --temperature, so that the sweep measures the decoding served "
        "(greedy: CID's answers drawn greedily, scored at T = 1); the run warns when it "
        "measured at another. Default: a served model's greedy default (0) with --server-url, "
        "for the warning only."),
    repeat_threshold: float = typer.Option(0.5, "--repeat-threshold", help="Share of a "
                                           "response's tokens found in the context above which "
                                           "it counts as repeating the context, in [0, 1]."),
    rouge_threshold: float = typer.Option(0.5, "--rouge-threshold", help="ROUGE-L against the "
                                          "reference above which a response counts as close "
                                          "to it, in [0, 1]."),
    bertscore_model: Optional[str] = typer.Option(None, "--bertscore-model", help="Model of "
                                                  "the BERTScore quality column (default: not "
                                                  "computed)."),
    factkb_model: Optional[str] = typer.Option(None, "--factkb-model", help="Model of the "
                                               "FactKB quality column (default: not "
                                               "computed)."),
    redact: bool = typer.Option(False, "--redact", help="Mask PII (names, e-mails, phone "
                                "numbers, addresses, money amounts) in everything the report "
                                "and console show, found by the detectors of 'ctxleak pii "
                                "extract' (pattern-based: see the docs' Reliability page)."),
    control: bool = typer.Option(True, "--control/--no-control", help="Also score each "
                                 "response with another example's context (the nearest one's): "
                                 "what any context does to the query; each example is "
                                 "reported above it (on by default)."),
    controls: Optional[int] = typer.Option(None, "--controls", help="Control contexts per "
                                           "example (other examples' documents, nearest "
                                           "first). Default: 1 with 20 examples or more; with "
                                           "fewer, enough for 20 control influences in all, so "
                                           "that a flag has a stated false-flag rate."),
    passages: Optional[str] = typer.Option(None, "--passages", help="Split each context into "
                                           "passages, sentence or paragraph, and measure each "
                                           "passage's influence (left out, response scored); a "
                                           "row's own 'passages' list is used as it is."),
    exposure_budget: Optional[float] = typer.Option(None, "--exposure-budget", help="With "
                                                    "passages or retrieved documents: the most "
                                                    "leave-one-out influence (nats, summed over "
                                                    "every answer whose context held it) a "
                                                    "document may have. Documents above it are "
                                                    "listed, and the command exits with status "
                                                    "3 (for CI)."),
    log_format: str = typer.Option("auto", "--log-format", help="How to read --data: rows "
                                   "(one example a line), openinference (OpenInference / "
                                   "OpenTelemetry spans as JSONL, one row per trace) or auto "
                                   "(spans when the first line is one)."),
    class_field: str = typer.Option("classification", "--class-field", help="Retrieved "
                                    "documents: the metadata field that gives a document's "
                                    "class (public, internal, restricted, ...)."),
    class_budget: Optional[str] = typer.Option(None, "--class-budget", help="Leak budget per "
                                               "document class, e.g. restricted=0,internal=5 "
                                               "(nats above the per-document control, summed "
                                               "over the answers in which the document "
                                               "leaked; a copy exceeds a budget of 0). Class "
                                               "public never fails. A document over its budget "
                                               "makes the command exit with status 3."),
    document_budget: Optional[str] = typer.Option(None, "--document-budget", help="Leak "
                                                  "budget per document id, e.g. hr-7=0 (nats, "
                                                  "as --class-budget; wins over its class's)."),
    prompt_messages: Optional[str] = typer.Option(
        None, "--prompt-messages", help="The app's prompt: a JSON file of chat messages "
        '([{"role", "content"}], with {context} and {query}); each logged answer is scored '
        "under them, through the model's chat template."),
    system_prompt: Optional[str] = typer.Option(None, "--system-prompt", help="The app's "
                                                "system prompt, before one user turn holding "
                                                "the template."),
    app_prompt: Optional[bool] = typer.Option(
        None, "--app-prompt/--no-app-prompt", help="Score logged answers under the app's "
        "prompt: by default a trace's LLM input messages where it has them; --app-prompt "
        "requires them (or --prompt-messages); --no-app-prompt uses ctxleak's template."),
    *,
    common: CommonOptions,
) -> None:
    """Measure the expected context influence of a dataset (Def. 3.1-3.4).

    Example:  ctxleak influence --data demo --limit 5 --ngram 8 --output runs/demo
    """
    if ctx.invoked_subcommand is not None:
        return
    from ctxleak.api import load_retriever, retrieve, run_params
    from ctxleak.cli.output import show
    from ctxleak.methods.influence.params import InfluenceParams
    from ctxleak.results.influence import InfluenceResult

    params = InfluenceParams(task=task, template=template, fields=fields, lambda_=lambda_,
                             temperature=temperature, max_new_tokens=max_new_tokens,
                             min_new_tokens=min_new_tokens, ngram=ngram, stride=stride,
                             context_sizes=context_sizes, bounded_eps=bounded_eps,
                             mechanisms=list(mechanisms) or None, datastore=datastore,
                             classes=classes, deployed_temperature=deployed_temperature,
                             repeat_threshold=repeat_threshold, rouge_threshold=rouge_threshold,
                             bertscore_model=bertscore_model, factkb_model=factkb_model,
                             redact=redact, control=control, controls=controls,
                             passages=passages,
                             exposure_budget=exposure_budget, log_format=log_format,
                             class_field=class_field, class_budgets=class_budget,
                             document_budgets=document_budget,
                             prompt_messages=prompt_messages, system_prompt=system_prompt,
                             app_prompt=app_prompt)
    rows = data if retriever is None else retrieve(load_retriever(retriever), data)
    result = run_params(params, common, rows)
    show(result)
    if isinstance(result, InfluenceResult) and result.over_budget():
        # the breaches are listed once, in the console's lines above ("over budget: ...")
        typer.echo(f"{len(result.over_budget())} document(s) over budget (listed above): exit "
                   f"status {OVER_BUDGET}", err=True)
        raise typer.Exit(OVER_BUDGET)


@influence_app.command("explain")
@with_common_options
def explain(
    context: str = typer.Option(..., "--context", help="The context text (or @FILE to read it)."),
    query: str = typer.Option("", "--query", help="The query (empty for summarisation)."),
    task: str = typer.Option("qa", "--task", help="qa, summarization or custom."),
    template: Optional[str] = generation_option("--template", None, "."),
    lambda_: float = generation_option("--lambda", 1.0, " (one value here)."),
    temperature: float = generation_option("--temperature", 0.8, " > 0 (one value here)."),
    max_new_tokens: int = generation_option("--max-new-tokens", 50, " of the response."),
    min_new_tokens: Optional[int] = generation_option(
        "--min-new-tokens", None, " (default: 10, or --max-new-tokens if smaller)."),
    ngram: int = typer.Option(4, "--ngram", help="Window size of the top n-grams listed."),
    top: int = typer.Option(5, "--top", help="How many top n-grams to list."),
    *,
    common: CommonOptions,
) -> None:
    """One prompt: the response, the uni-gram influence of each context token on the first
    response token as a heatmap (Table 1), and the most influential n-grams."""
    from ctxleak.api import influence_explain
    from ctxleak.cli.output import show

    result = influence_explain(common.model, context, query, **api_options(common), task=task,
                               template=template, lambda_=lambda_, temperature=temperature,
                               max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                               ngram=ngram, top=top)
    show(result)


@influence_app.command("frontier")
def frontier_cmd(
    runs: list[str] = typer.Argument(..., help="The run folder of an influence sweep; several "
                                     "join their settings on one frontier (the same "
                                     "questions, model and options)."),
    audit: list[str] = typer.Option([], "--audit", help="The run folder of a canary audit "
                                    "(ctxleak canary) of one of the sweep's settings; its "
                                    "attack's ε lower bound joins that setting's row. "
                                    "Repeatable."),
    keep: float = typer.Option(0.9, "--keep", help="Share of the best utility the "
                               "recommendation must keep, in (0, 1]."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Also write the frontier's plot "
                                       "(utility against leak, one point per setting, the "
                                       "Pareto front filled) to this PNG file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --plot "
                                   "file."),
) -> None:
    """The privacy–utility frontier of a finished sweep, or of runs measured apart, with the ε
    lower bounds of canary audits beside each setting's guarantee (no model is loaded)."""
    import ctxleak
    from ctxleak.cli.output import plain_output
    from ctxleak.errors import ConfigError
    from ctxleak.report.frontier import print_frontier, save_frontier_plot
    from ctxleak.results.influence import InfluenceResult

    results = [ctxleak.load_result(run) for run in runs]
    for run, result in zip(runs, results):
        if not isinstance(result, InfluenceResult):
            raise ConfigError(f"{run} is a {result.config.get('command')} run, not an "
                              f"influence sweep", param="run")
    first = results[0]
    assert isinstance(first, InfluenceResult)
    front = first.frontier_summary(keep, [ctxleak.load_result(a) for a in audit], results[1:])
    if not front.get("rows") or len(front["rows"]) < 2:
        raise ConfigError(f"{' and '.join(runs)} measured one setting: a frontier needs a "
                          f"sweep (--lambda 0,0.5,1, --bounded-eps 2,8 or --mechanism)",
                          param="run")
    if plot is not None:
        save_frontier_plot(front, plot, overwrite=overwrite)
    print_frontier(front, plain=plain_output())
    if plot is not None:
        print(f"plot: {plot}")


def register(app: typer.Typer) -> None:
    app.add_typer(influence_app, name="influence")
