"""The run behind ``ctxleak influence``: loop over settings and examples, write the run dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ctxleak.cli.options import CommonOptions
from ctxleak.cli.session import format_cell, is_main, load_lm, open_run, run_examples


def run_influence(common: CommonOptions, config: dict[str, Any], examples: Sequence[Any],
                  grid: Sequence[Any], options: Any, *, data_file: Any = None,
                  redact: bool = False,
                  bertscore_model: str | None = None, factkb_model: str | None = None) -> None:
    from ctxleak.engine.generation import derive_seed
    from ctxleak.methods.influence.pipeline import measure_example, summarize_setting
    from ctxleak.methods.influence.quality import quality_scores
    from ctxleak.report.influence_report import build_report, influence_plots
    from ctxleak.run.provenance import provenance

    run = open_run("influence", common, config, inputs={"data": data_file})
    lm = load_lm(common)
    index = {ex.id: i for i, ex in enumerate(examples)}
    items = [(setting, ex) for setting in grid for ex in examples]

    def work(_: int, item: Any) -> dict[str, Any]:
        setting, ex = item
        seed = derive_seed(common.seed, index[ex.id])  # same draws across settings
        return measure_example(lm, ex, setting, options, seed, common.batch_size)

    with run:
        records = run_examples(run, items, key=lambda it: f"{it[1].id}|{it[0].key}", work=work,
                               desc="influence")
    if not is_main(run):
        return
    by_id = {ex.id: ex for ex in examples}
    summaries = []
    for setting in grid:
        rows = [r for r in records if r["setting"] == setting.key]
        if rows:
            summary = summarize_setting(rows, seed=common.seed)
            examples_of = [by_id[r["id"].split("|")[0]] for r in rows]
            summary["quality"] = quality_scores(
                [r["response"] for r in rows], [ex.reference for ex in examples_of],
                [ex.context for ex in examples_of], bertscore_model, factkb_model)
            summaries.append(summary)
    prov = provenance(lm, prompt_templates=_templates(examples, options.template))
    images = influence_plots(summaries)
    for name, png in images.items():
        run.write_file(name, png)
    summary = {"settings": summaries}
    run.write_results(summary, provenance=prov, n_effective=len(records))
    tokens = lm.token_strings(records[0]["response_ids"]) if records else None
    meta = {"model": lm.info.name, "examples": len(examples), "settings": len(grid),
            "run directory": str(run.path),
            "contexts cut to the window": sum(s["truncated_contexts"] for s in summaries),
            "n-grams clipped to the context": sum(s["ngram_clipped"] for s in summaries)}
    report = build_report(summaries, records, images, meta, token_strings=tokens, redact=redact)
    report.save(run.path / "report.html", mode=run.file_mode)
    _print_summary(summaries, run.path)


def _templates(examples: Sequence[Any], template: str | None) -> dict[str, str]:
    from ctxleak.methods.influence.data import template_for

    return {ex.task: template_for(ex, template) for ex in examples}


def _print_summary(summaries: Sequence[dict[str, Any]], path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from ctxleak.report.influence_report import table_rows

    rows = table_rows(summaries)
    table = Table(title="Expected context influence (paper 000, Def. 3.3)")
    for col in rows[0]:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*[format_cell(v) for v in row.values()])
    console = Console()
    console.print(table)
    console.print(f"results: {path / 'results.json'}   report: {path / 'report.html'}")


def run_explain(common: CommonOptions, *, context: str, query: str, task: str,
                template: str | None, lam: float, temperature: float, max_new_tokens: int,
                min_new_tokens: int, ngram: int, top: int) -> None:
    import numpy as np

    from ctxleak.engine.generation import derive_seed
    from ctxleak.errors import ConfigError
    from ctxleak.methods.influence.cid import CIDConfig, generate_cid
    from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
    from ctxleak.methods.influence.ngrams import next_token_unigram_influence, window_influence, windows
    from ctxleak.report import Report, plots
    from ctxleak.run.provenance import provenance
    from ctxleak.run.records import read_text_file
    from ctxleak.run.validate import check_limit, check_template

    check_limit(ngram, "--ngram")
    check_limit(top, "--top")
    check_template(template, "--template", ("context", "query"), required=("context",))
    if context.startswith("@"):
        context = read_text_file(context[1:])
    if not context.strip():
        raise ConfigError("--context is empty")
    if task == "custom" and not template:
        raise ConfigError("--task custom needs --template")
    config = CIDConfig(lam=lam, temperature=temperature, max_new_tokens=max_new_tokens,
                       min_new_tokens=min_new_tokens)
    run = open_run("influence-explain", common,
                   {"context": context, "query": query, "task": task, "template": template,
                    "lambda": lam, "temperature": temperature, "ngram": ngram})
    if not is_main(run):
        return  # one prompt: under torchrun the other processes have nothing to do
    lm = load_lm(common)
    example = InfluenceExample("explain", context, query, None, task)
    parts, dropped = prompt_parts(lm, example, template, reserve=max_new_tokens)
    response = generate_cid(lm, parts.full, parts.empty, config, derive_seed(common.seed, 0))
    if not response.token_ids:
        raise ConfigError("the model ended its response at once: raise --min-new-tokens "
                          "or try another --seed")
    first = response.token_ids[0]
    unigram = next_token_unigram_influence(lm, parts, [], first, lam=lam,
                                           temperature=temperature,
                                           min_new_tokens=min_new_tokens)
    n = min(ngram, len(parts.context))
    spans = windows(len(parts.context), n, stride=1)
    win = window_influence(lm, parts, response.token_ids, spans, lam=lam,
                           temperature=temperature, min_new_tokens=min_new_tokens)
    order = np.argsort(-win.per_window)[:top]
    top_rows = [{"rank": k + 1, "tokens": f"{spans[i][0]}-{spans[i][1]}",
                 "n-gram": lm.decode(list(parts.context[spans[i][0]:spans[i][1]])),
                 "influence": float(win.per_window[i])} for k, i in enumerate(order)]
    ctx_tokens = lm.token_strings(list(parts.context))
    result = {"response": lm.decode(response.token_ids), "response_ids": response.token_ids,
              "first_token": lm.decode([first]), "influence": response.influence,
              "token_influence": response.token_influence.tolist(),
              "unigram_influence_on_first_token": unigram.tolist(),
              "context_tokens": ctx_tokens, "top_ngrams": top_rows,
              "context_truncated_by": dropped}
    run.write_results(result, provenance=provenance(lm), n_effective=1)
    report = Report("ctxleak influence explain", "Uni-gram influence on the next token "
                    "(paper 000, Table 1)")
    report.add_kv({"query": query, "response": result["response"],
                   "first response token": result["first_token"],
                   "response influence": response.influence})
    report.add_token_heatmap(ctx_tokens, unigram.tolist(),
                             caption="influence of deleting each context token on the first "
                             "response token")
    report.add_table(top_rows, caption=f"top {n}-grams by influence on the whole response")
    report.add_image(plots.line_plot({"window": ([float(a) for a, _ in spans],
                                                 win.per_window.tolist())},
                                     title=f"Influence of each {n}-gram (stride 1)",
                                     xlabel="window start (token)", ylabel="response influence"))
    report.save(run.path / "report.html", mode=run.file_mode)
    run.close()
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]response[/bold]: {result['response']}")
    console.print(f"response influence: {response.influence:.4g}")
    table = Table(title=f"Most influential context {n}-grams")
    for col in ("rank", "tokens", "n-gram", "influence"):
        table.add_column(col)
    for row in top_rows:
        table.add_row(str(row["rank"]), row["tokens"], json.dumps(row["n-gram"]),
                      f"{row['influence']:.4g}")
    console.print(table)
    console.print(f"report: {run.path / 'report.html'}")
