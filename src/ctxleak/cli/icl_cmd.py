"""``ctxleak icl``: ICLInf, the privacy loss of in-context exemplars (paper 001 §3-4, App. B, E.1).

Parses flags, loads and checks the data (before the model), runs
:func:`ctxleak.methods.icl.measure_query` per (shots, query) with resume, and writes
results.json, samples.jsonl, report.html and the plots of the paper's Fig. 1, 3, 4 and 7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

import typer

from ctxleak.cli.options import CommonOptions, parse_int_list, with_common_options
from ctxleak.errors import ConfigError

_DATA = "Data"
_PROMPT = "Prompt"
_METHOD = "ICLInf"


def resolve_calibration(calibrate: bool, calibration: str | None) -> tuple[bool, ...]:
    """``--calibrate`` (= on) or ``--calibration off|on|both`` -> the settings to report."""
    if calibration is None:
        return (True,) if calibrate else (False,)
    table = {"off": (False,), "on": (True,), "both": (False, True)}
    value = str(calibration).strip().lower()
    if value not in table:
        raise ConfigError(f"--calibration must be off, on or both, not '{calibration}'")
    if calibrate and value == "off":
        raise ConfigError("--calibrate contradicts --calibration off")
    return table[value]


def resolve_spaces(output_space: str) -> tuple[str, ...]:
    table = {"labels": ("labels",), "vocab": ("vocab",), "both": ("labels", "vocab")}
    value = str(output_space).strip().lower()
    if value not in table:
        raise ConfigError(f"--output-space must be labels, vocab or both, not '{output_space}'")
    return table[value]


def parse_shots(shots: str | int) -> list[int]:
    values = parse_int_list(shots, "--shots")
    if not values:
        raise ConfigError("--shots needs at least one number, e.g. 4 or 1,2,4,8")
    for n in values:
        if n < 1:
            raise ConfigError(f"--shots must be at least 1, got {n}")
    return list(dict.fromkeys(values))


def _fmt_pm(s: dict[str, Any]) -> str:
    return f"{s['iclinf_mean']:.3f} ± {s['iclinf_std']:.3f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def summary_rows(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for n, by_variant in summary.items():
        for variant, s in by_variant.items():
            rows.append({"shots": int(n), "variant": variant, "queries": s["n"],
                         "ICLInf mean": round(s["iclinf_mean"], 4),
                         "ICLInf std": round(s["iclinf_std"], 4),
                         "accuracy": _pct(s["accuracy"]),
                         "mean loss by position": " ".join(
                             f"{v:.3f}" for v in s["mean_loss_by_position"])})
    return rows


def make_plots(summary: dict[str, dict[str, Any]], variants: Sequence[str]) -> dict[str, bytes]:
    """Fig. 1 (loss by position), Fig. 3 (shots sweep), Fig. 4 (calibration on/off) and Fig. 7
    (labels against vocabulary), the last three when the run has what they compare."""
    from ctxleak.report import plots

    out: dict[str, bytes] = {}
    series = {}
    for n, by_variant in summary.items():
        for variant in variants:
            curve = by_variant[variant]["mean_loss_by_position"]
            name = f"{variant}, {n} shots" if len(variants) > 1 else f"{n} shots"
            series[name] = (list(range(1, len(curve) + 1)), curve)
    out["loss_by_position.png"] = plots.line_plot(
        series, title="Mean privacy loss by position of the removed exemplar (paper Fig. 1)",
        xlabel="exemplar position i", ylabel="mean loss_i")
    shots = [int(n) for n in summary]
    if len(shots) > 1:
        sweep = {v: (shots, [summary[str(n)][v]["iclinf_mean"] for n in shots])
                 for v in variants}
        errors = {v: [summary[str(n)][v]["iclinf_std"] for n in shots] for v in variants}
        out["shots_sweep.png"] = plots.line_plot(
            sweep, errors=errors,
            title="ICLInf against the number of exemplars (paper Fig. 3)",
            xlabel="number of shots", ylabel="ICLInf (mean ± std)")

    def compare(pairs: list[tuple[str, str]], title: str) -> bytes:
        cats, vals, errs = [], [], []
        for n in summary:
            for label, variant in pairs:
                s = summary[n][variant]
                cats.append(f"{label}, {n} shots" if len(summary) > 1 else label)
                vals.append(s["iclinf_mean"])
                errs.append(s["iclinf_std"])
        return plots.bar_plot(cats, vals, errors=errs, title=title, ylabel="ICLInf (mean ± std)")

    spaces = [s for s in ("labels", "vocab") if any(v.startswith(s) for v in variants)]
    if all(f"{s}_calibrated" in variants and s in variants for s in spaces) and spaces:
        pairs = [(f"{s} {state}", f"{s}{suffix}") for s in spaces
                 for state, suffix in (("uncalibrated", ""), ("calibrated", "_calibrated"))]
        out["calibration.png"] = compare(pairs, "ICLInf with and without calibration "
                                                "(paper Fig. 4)")
    if len(spaces) == 2:
        cal = [c for c in ("", "_calibrated") if f"labels{c}" in variants]
        pairs = [(f"{s}{' calibrated' if c else ''}", f"{s}{c}") for c in cal
                 for s in ("labels", "vocab")]
        out["labels_vs_vocab.png"] = compare(pairs, "ICLInf on the label distribution and the "
                                                    "full vocabulary (paper Fig. 7)")
    return out


def write_report(run, summary: dict[str, dict[str, Any]], records: list[dict[str, Any]],
                 images: dict[str, bytes], headline: dict[str, Any], info: dict[str, Any]) -> None:
    from ctxleak.report import Report

    report = Report("ctxleak icl: privacy loss of in-context exemplars (ICLInf)",
                    f"model {info['model']} · data {info['data']} · format {info['format']}")
    report.add_text(
        "ICLInf (paper 001, Eq. 4): for each query, the largest change over labels y and removed "
        "exemplars i of log A(S, x)(y) − log A(S∖e_i, x)(y), averaged over queries. A is the "
        "next-token distribution restricted to the labels and renormalised (output space "
        "'labels'), or the full next-token distribution ('vocab'); 'calibrated' applies "
        "contextual calibration to every prompt, each with its own content-free distribution.")
    report.add_heading("Summary")
    report.add_kv(headline, caption="headline")
    report.add_table(summary_rows(summary), caption="ICLInf mean ± std over queries, accuracy, "
                                                    "mean loss by exemplar position")
    captions = {
        "loss_by_position.png": "Mean loss by position of the removed exemplar (Fig. 1: the U "
                                "shape of the paper).",
        "shots_sweep.png": "ICLInf against the number of shots (Fig. 3).",
        "calibration.png": "With and without contextual calibration (Fig. 4).",
        "labels_vs_vocab.png": "Label distribution against full vocabulary (Fig. 7).",
    }
    report.add_heading("Plots")
    for name, png in images.items():
        report.add_image(png, captions.get(name, name))
    report.add_heading("Queries")
    first = next(iter(records[0]["variants"])) if records else None
    rows = []
    for r in records[:50]:
        v = r["variants"][first]
        rows.append({"id": r["id"], "label": r["label"], "prediction": v["prediction"],
                     "ICLInf_j": round(v["iclinf"], 4),
                     "loss by position": " ".join(f"{x:.3f}" for x in v["loss_by_position"]),
                     "exemplar labels": ", ".join(r["exemplar_labels"]),
                     "text": r["text"][:160]})
    report.add_table(rows, caption=f"first {len(rows)} of {len(records)} queries, variant "
                                   f"'{first}' (all in samples.jsonl)")
    report.add_heading("Configuration")
    report.add_kv(info, caption="run")
    report.save(run.path / "report.html", mode=run.file_mode)


def register(app: typer.Typer) -> None:
    @app.command("icl")
    @with_common_options
    def icl(
        common: CommonOptions,
        data: str = typer.Option(
            "demo", "--data", "-d", rich_help_panel=_DATA,
            help="Training data (the exemplar pool): a JSONL or CSV file of {text, label}, "
                 "'demo' (bundled four-topic news task) or hf:agnews|dbpedia|trec (needs the "
                 "'datasets' package and network)."),
        test_data: Optional[str] = typer.Option(
            None, "--test-data", rich_help_panel=_DATA,
            help="Queries: a JSONL or CSV file of {text, label}. Without it, lines of --data "
                 "whose --split field is 'test' are the queries."),
        split: str = typer.Option(
            "split", "--split", rich_help_panel=_DATA,
            help="Field of --data that says 'train' or 'test' (used without --test-data)."),
        text_field: str = typer.Option("text", "--text-field", rich_help_panel=_DATA,
                                       help="Name of the text field in the files."),
        label_field: str = typer.Option("label", "--label-field", rich_help_panel=_DATA,
                                        help="Name of the label field in the files."),
        labels: Optional[str] = typer.Option(
            None, "--labels", rich_help_panel=_DATA,
            help="Label verbalisers in order, 'World,Sports,...', or raw=name pairs "
                 "'0=World,1=Sports' (default: the format's labels, else those of the data)."),
        queries: int = typer.Option(
            100, "--queries", "-q", rich_help_panel=_DATA,
            help="Number of test queries (a seeded sample; all when the test set is smaller). "
                 "The paper uses 500."),
        fmt: str = typer.Option(
            "auto", "--format", rich_help_panel=_PROMPT,
            help="Prompt format of paper Table 2: agnews, dbpedia, trec, or custom; auto = the "
                 "dataset's own (demo: agnews), custom for files."),
        instruction: Optional[str] = typer.Option(
            None, "--instruction", rich_help_panel=_PROMPT,
            help="Instruction before the exemplars; '{labels}' becomes the label list; \\n for "
                 "newlines."),
        exemplar_template: Optional[str] = typer.Option(
            None, "--exemplar-template", rich_help_panel=_PROMPT,
            help="One exemplar, with {text} and {label} (default 'Article: {text}\\nAnswer: "
                 "{label}\\n\\n')."),
        query_template: Optional[str] = typer.Option(
            None, "--query-template", rich_help_panel=_PROMPT,
            help="The query, with {text} (default 'Article: {text}\\nAnswer:')."),
        max_text_tokens: int = typer.Option(
            256, "--max-text-tokens", rich_help_panel=_PROMPT,
            help="Cut longer texts to this many tokens (counted per query in samples.jsonl)."),
        shots: str = typer.Option(
            "4", "--shots", "-k", rich_help_panel=_METHOD,
            help="Exemplars per prompt; a comma list (1,2,4,8) runs a sweep into one run "
                 "directory."),
        calibrate: bool = typer.Option(
            False, "--calibrate", rich_help_panel=_METHOD,
            help="Apply contextual calibration (App. B) to every prompt, leave-one-out ones "
                 "included. Same as --calibration on."),
        calibration: Optional[str] = typer.Option(
            None, "--calibration", rich_help_panel=_METHOD,
            help="off, on or both (report with and without calibration, Fig. 4)."),
        calibration_eps: float = typer.Option(
            1e-6, "--calibration-eps", rich_help_panel=_METHOD,
            help="ε of W = diag(1/(p_cf + ε))."),
        output_space: str = typer.Option(
            "labels", "--output-space", rich_help_panel=_METHOD,
            help="labels (renormalised label distribution, as in the paper), vocab (full "
                 "next-token distribution, App. E.1) or both (Fig. 7)."),
        label_scoring: str = typer.Option(
            "first-token", "--label-scoring", rich_help_panel=_METHOD,
            help="first-token: each label's first token with its leading space (the paper); "
                 "full: the whole label string."),
    ) -> None:
        """ICLInf: how much each in-context exemplar changes the model's answer (paper 001).

        For each query, draws SHOTS exemplars from the training data, scores the prompt with all
        of them and with each one left out, and reports the largest change in the log
        probability of any label (the data-dependent DP privacy loss), its mean ± std over
        queries, the accuracy and the loss by exemplar position.

        The prompts are completions in the format of the paper's Table 2 (ending in
        'Answer:'), so the model's chat template is used only with --chat-template on.

        Example:  ctxleak icl --data demo --shots 1,2,4 --calibration both --limit 10
        """
        from ctxleak.cli.session import is_main, load_lm, open_run, run_examples, say
        from ctxleak.methods.icl import (
            ICLConfig,
            LabelScorer,
            PromptBuilder,
            load_task,
            measure_query,
            query_id,
            select_queries,
            summarize_records,
        )
        from ctxleak.run.provenance import provenance

        # 1. flags and data, all checked before the model is loaded
        shots_list = parse_shots(shots)
        config = ICLConfig(output_spaces=resolve_spaces(output_space),
                           calibration=resolve_calibration(calibrate, calibration),
                           label_scoring=label_scoring, calibration_eps=calibration_eps,
                           max_text_tokens=max_text_tokens)
        if queries < 1:
            raise ConfigError(f"--queries must be at least 1, got {queries}")
        task = load_task(data, test_data, split_field=split, text_field=text_field,
                         label_field=label_field, labels=labels, fmt=fmt,
                         instruction=instruction, exemplar_template=exemplar_template,
                         query_template=query_template)
        task.check_shots(shots_list)
        chosen = select_queries(len(task.test), queries, common.seed)
        if queries > len(task.test):
            say(f"the test set has {len(task.test)} examples: using all of them as queries")
        if common.limit is not None:
            chosen = chosen[:common.limit]

        # 2. the run folder (a --resume into another run is refused before the model loads)
        run_config = {
            "data": data, "test_data": test_data, "split": split, "text_field": text_field,
            "label_field": label_field, "labels": list(task.labels), "queries": queries,
            "format": task.fmt.name, "instruction": task.fmt.instruction,
            "exemplar_template": task.fmt.exemplar, "query_template": task.fmt.query,
            "shots": shots_list, "icl": config.to_dict(),
        }
        run = open_run("icl", common, run_config,
                       inputs={"data": task.source.get("train"),
                               "test_data": task.source.get("test")})

        # 3. the model; ICL prompts are completions ending in 'Answer:', so the chat template
        #    is used only when asked for (--chat-template on)
        chat = common.chat_template == "on"
        lm = load_lm(replace(common, chat_template="on" if chat else "off"))
        builder = PromptBuilder(lm, task.fmt, task.labels, chat=chat,
                                max_text_tokens=config.max_text_tokens)
        scorer = LabelScorer(lm, task.labels, config.label_scoring, builder.label_prefix)

        with run:
            say(f"{len(task.train)} training examples, {len(chosen)} queries, labels "
                f"{', '.join(task.labels)}; shots {shots_list}; variants "
                f"{', '.join(config.variants)} -> {run.path}")
            items = [(n, j) for n in shots_list for j in chosen]

            def work(_: int, item: tuple[int, int]) -> dict[str, Any]:
                n, j = item
                return measure_query(lm, task, builder, scorer, config, n, j, common.seed,
                                     batch_size=common.batch_size)

            records = run_examples(run, items, key=lambda it: query_id(*it), work=work,
                                   desc="icl queries")
            if not is_main(run):
                return
            summary = summarize_records(records, config.variants)
            main_variant = config.variants[0]
            first = summary[str(shots_list[0])][main_variant]
            seconds = [r["seconds"] for r in records]
            truncated = sum(r.get("truncated_texts", 0) for r in records)
            headline = {"shots": shots_list[0], "variant": main_variant,
                        "ICLInf": _fmt_pm(first), "accuracy": _pct(first["accuracy"]),
                        "queries": first["n"],
                        "seconds per query": round(sum(seconds) / max(len(seconds), 1), 3)}
            template = {"instruction": task.fmt.instruction_text(task.labels),
                        "exemplar": task.fmt.exemplar, "query": task.fmt.query,
                        "chat_template": chat, "label_prefix": builder.label_prefix}
            label_tokens = {lab: seq for lab, seq in zip(task.labels, scorer.sequences)}
            results = {
                "iclinf": summary, "labels": list(task.labels), "shots": shots_list,
                "variants": config.variants, "headline": headline,
                "n_queries": len(chosen), "query_indices": chosen,
                "time_per_query_s": headline["seconds per query"],
                "truncated_texts": truncated, "source": task.source,
            }
            run.write_results(results, n_effective=len(records),
                              provenance=provenance(lm, prompt_template=template,
                                                    label_tokens=label_tokens))
            images = make_plots(summary, config.variants)
            for name, png in images.items():
                run.write_file(name, png)
            info = {"model": lm.info.name, "data": data, "format": task.fmt.name,
                    "labels": ", ".join(task.labels), "label scoring": config.label_scoring,
                    "output spaces": ", ".join(config.output_spaces),
                    "calibration": ", ".join("on" if c else "off" for c in config.calibration),
                    "shots": ", ".join(map(str, shots_list)), "seed": common.seed,
                    "texts cut to --max-text-tokens": truncated,
                    "instruction": template["instruction"], "exemplar template":
                    task.fmt.exemplar, "query template": task.fmt.query}
            write_report(run, summary, records, images, headline, info)

        if truncated:
            say(f"{truncated} text(s) were cut to {max_text_tokens} tokens (--max-text-tokens)")
        typer.echo(f"ICLInf, {lm.info.name}, {len(chosen)} queries "
                   f"(mean ± std over queries; loss by exemplar position 1..n):")
        for row in summary_rows(summary):
            typer.echo(f"  {row['shots']:>2} shots  {row['variant']:<18} ICLInf "
                       f"{row['ICLInf mean']:.3f} ± {row['ICLInf std']:.3f}  accuracy "
                       f"{row['accuracy']:>6}  by position: {row['mean loss by position']}")
        typer.echo(f"time per query: {headline['seconds per query']:.2f} s")
        typer.echo(f"run directory: {run.path} (results.json, samples.jsonl, report.html)")
