"""``ctxleak influence``: context influence of a dataset under CID, and ``influence explain``."""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, api_options, with_common_options

influence_app = typer.Typer(help="Context influence (Estimating Privacy Leakage of Augmented "
                            "Contextual Knowledge in Language Models): how much of each "
                            "response came from the context, under Context Influence Decoding "
                            "(CID).\n\n"
                            "Example: ctxleak influence --data demo --limit 5 --ngram 8 "
                            "--output runs/demo\n\nAny flag can also come from "
                            "--config FILE.yaml (flags on the command line win).",
                            no_args_is_help=False, invoke_without_command=True)


@influence_app.callback()
@with_common_options
def influence(
    ctx: typer.Context,
    data: str = typer.Option("demo", "--data", "-d", help="JSONL/CSV with context, query and "
                             "optional reference and id fields, 'demo' (bundled set), or "
                             "cnn_dailymail / pubmedqa (needs the datasets package and network)."),
    task: str = typer.Option("auto", "--task", help="qa, summarization, custom (needs "
                             "--template) or auto (each example's 'task' field, else qa)."),
    template: Optional[str] = typer.Option(None, "--template", help="Prompt template with "
                                           "{context} and {query}, e.g. 'Document: {context}. "
                                           "{query}'."),
    fields: Optional[str] = typer.Option(None, "--fields", help="Rename file fields, e.g. "
                                         "'article=context,highlights=reference'."),
    lam: str = typer.Option("1.0", "--lambda", help="Context influence level λ ≥ 0 "
                            "(0 = no context, 1 = plain decoding, >1 amplifies); a comma list "
                            "sweeps."),
    temperature: str = typer.Option("0.8", "--temperature", help="Sampling temperature > 0; a "
                                    "comma list sweeps."),
    max_new_tokens: int = typer.Option(50, "--max-new-tokens"),
    min_new_tokens: Optional[int] = typer.Option(None, "--min-new-tokens", help="EOS is masked "
                                                 "before this many tokens, in both streams "
                                                 "(default: 10, or --max-new-tokens if smaller)."),
    ngram: str = typer.Option("full", "--ngram", help="'full' (the whole context, n = |D|) or "
                              "n: also the influence of every n-token window of the context."),
    stride: Optional[int] = typer.Option(None, "--stride", help="Window stride (default n: "
                                         "non-overlapping windows)."),
    context_sizes: Optional[str] = typer.Option(None, "--context-sizes", help="Also truncate "
                                                "contexts to their first k tokens, e.g. "
                                                "32,64,128,256 (Fig. 2b)."),
    bounded_eps: Optional[float] = typer.Option(None, "--bounded-eps", help="Bounded CID: "
                                                "ε-DP per token for any n-gram (App. B), so "
                                                "ε × tokens for a response (basic composition); "
                                                "λ becomes the upper bound λ_max."),
    repeat_threshold: float = typer.Option(0.5, "--repeat-threshold"),
    rouge_threshold: float = typer.Option(0.5, "--rouge-threshold"),
    bertscore_model: Optional[str] = typer.Option(None, "--bertscore-model"),
    factkb_model: Optional[str] = typer.Option(None, "--factkb-model"),
    redact: bool = typer.Option(False, "--redact", help="Mask e-mails and phone numbers in the "
                                "report and console."),
    *,
    common: CommonOptions,
) -> None:
    """Measure the expected context influence of a dataset (Def. 3.1-3.4).

    Example:  ctxleak influence --data demo --limit 5 --ngram 8 --output runs/demo
    """
    if ctx.invoked_subcommand is not None:
        return
    from ctxleak.api import run_params
    from ctxleak.cli.output import show
    from ctxleak.methods.influence.params import InfluenceParams

    params = InfluenceParams(task=task, template=template, fields=fields, lam=lam,
                             temperature=temperature, max_new_tokens=max_new_tokens,
                             min_new_tokens=min_new_tokens, ngram=ngram, stride=stride,
                             context_sizes=context_sizes, bounded_eps=bounded_eps,
                             repeat_threshold=repeat_threshold, rouge_threshold=rouge_threshold,
                             bertscore_model=bertscore_model, factkb_model=factkb_model,
                             redact=redact)
    result = run_params(params, common, data)
    show(result)


@influence_app.command("explain")
@with_common_options
def explain(
    context: str = typer.Option(..., "--context", help="The context text (or @FILE to read it)."),
    query: str = typer.Option("", "--query", help="The query (empty for summarisation)."),
    task: str = typer.Option("qa", "--task", help="qa, summarization or custom."),
    template: Optional[str] = typer.Option(None, "--template"),
    lam: float = typer.Option(1.0, "--lambda"),
    temperature: float = typer.Option(0.8, "--temperature"),
    max_new_tokens: int = typer.Option(50, "--max-new-tokens"),
    min_new_tokens: Optional[int] = typer.Option(None, "--min-new-tokens"),
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
                               template=template, lam=lam, temperature=temperature,
                               max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                               ngram=ngram, top=top)
    show(result)


def register(app: typer.Typer) -> None:
    app.add_typer(influence_app, name="influence")
