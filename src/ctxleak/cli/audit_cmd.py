"""``ctxleak audit``: audit DP synthetic-text generation (paper 001 §5, App. C; SPEC §5).

Every input is checked and every target calibrated (Algorithm 3, pure maths) before the model is
loaded. The run directory gets ``samples.jsonl`` (one line per generated sequence per target and
δ, with its per-token data-dependent RDP), ``synthetic.jsonl`` (the texts), ``results.json``,
``report.html`` and the plots.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Optional

import typer

from ctxleak.cli.options import CommonOptions, with_common_options

_SEARCH = {"temperature": "temperature", "clip": "clip", "subset-size": "subset_size"}


def _positive(flag: str, value: float) -> None:
    from ctxleak.errors import ConfigError

    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{flag} must be a positive number, got {value:g}")


def build_config(*, target_eps: str, delta: str, subset_size: int, clip: float,
                 temperature: float, n_gen: int, max_tokens: int, min_tokens: int, search: str,
                 orders: str, label: str, template: str | None):
    """Parse and check the audit flags into an :class:`AuditConfig` (ConfigError on mistakes)."""
    from ctxleak.cli.dp_cmd import parse_float_list, parse_orders
    from ctxleak.errors import ConfigError
    from ctxleak.methods.audit import TEMPLATE, AuditConfig, check_template

    targets = parse_float_list(target_eps, "--target-eps")
    deltas = parse_float_list(delta, "--delta")
    for d in deltas:
        if not d < 1:
            raise ConfigError(f"--delta must be in (0, 1), got {d:g}")
    for flag, values in (("--target-eps", targets), ("--delta", deltas)):
        if len(set(values)) != len(values):
            raise ConfigError(f"{flag} lists a value twice: {', '.join(f'{v:g}' for v in values)}")
    _positive("--clip", clip)
    _positive("--temperature", temperature)
    if subset_size < 2:
        raise ConfigError(f"--subset-size must be at least 2 (the leave-one-out neighbours need "
                          f"s - 1 >= 1 prompts), got {subset_size}")
    if n_gen < 1 or max_tokens < 1:
        raise ConfigError(f"--n-gen and --max-tokens must be >= 1, got {n_gen} and {max_tokens}")
    if not 0 <= min_tokens <= max_tokens:
        raise ConfigError(f"--min-tokens must be between 0 and --max-tokens ({max_tokens}), "
                          f"got {min_tokens}")
    if search not in _SEARCH:
        raise ConfigError(f"--search must be one of {', '.join(_SEARCH)}, got {search!r}")
    if not label.strip():
        raise ConfigError("--label is empty: name a label (e.g. Sports) or 'all'")
    return AuditConfig(target_eps=tuple(targets), deltas=tuple(deltas), subset_size=subset_size,
                       clip=clip, temperature=temperature, n_gen=n_gen, max_tokens=max_tokens,
                       min_tokens=min_tokens, search=_SEARCH[search],
                       orders=tuple(parse_orders(orders)), label=label.strip(),
                       template=check_template(template) if template else TEMPLATE)


def plan(config: Any, n_examples: int) -> list[Any]:
    """Algorithm 3 for every (δ, target), with the data-size checks, as ConfigErrors."""
    from ctxleak.errors import ConfigError
    from ctxleak.methods.audit.pipeline import check_data_size, check_subset_sizes, plan_audit

    try:
        check_data_size(config, n_examples)
        settings = plan_audit(config)
        check_subset_sizes(settings, n_examples)
    except ValueError as exc:
        raise ConfigError(f"{exc} (see --subset-size, --label, --data)"
                          if "subset size" in str(exc) else str(exc)) from None
    return settings


def register(app: typer.Typer) -> None:
    """Add the ``audit`` command to ``app``."""

    @app.command("audit")
    @with_common_options
    def audit(
        data: str = typer.Option("demo", "--data", "-d", help="Private examples: JSONL/CSV with a "
                                 "text field (and optional label), or 'demo' (the bundled "
                                 "news-classification train split)."),
        text_field: str = typer.Option("text", "--text-field", help="Field holding the text."),
        label_field: str = typer.Option("label", "--label-field", help="Field holding the "
                                        "label (optional in the file)."),
        label: str = typer.Option("Sports", "--label", help="Use the examples with this label "
                                  "and write it in the prompts (paper: Sports); 'all' uses every "
                                  "example, each under its own label."),
        template: Optional[str] = typer.Option(None, "--template", help="One-shot prompt with "
                                               "{text} and optional {label} (default: the "
                                               "paper's Table 3 prompt)."),
        subset_size: int = typer.Option(8, "--subset-size", "-s", help="One-shot prompts per "
                                        "sequence s (paper: 50)."),
        clip: float = typer.Option(10.0, "--clip", help="Logit clip bound c (paper: 10)."),
        temperature: float = typer.Option(2.0, "--temperature", help="Sampling temperature τ "
                                          "when --search is clip or subset-size (paper: 2); "
                                          "the search's start otherwise."),
        search: str = typer.Option("temperature", "--search", help="Parameter calibrated to each "
                                   "target ε (Tables 4, 5, 6): temperature, clip or subset-size."),
        target_eps: str = typer.Option("1,10,100", "--target-eps", help="Target ε values, "
                                       "comma-separated (paper: 0.5,1,5,10,20,50,100)."),
        delta: str = typer.Option("1e-5", "--delta", help="δ values in (0, 1), comma-separated; "
                                  "one line each in the plot (Fig. 6)."),
        n_gen: int = typer.Option(4, "--n-gen", help="Sequences per target N_gen (paper: 50)."),
        max_tokens: int = typer.Option(24, "--max-tokens", help="Max new tokens per sequence "
                                       "T_max (paper: 40)."),
        min_tokens: int = typer.Option(0, "--min-tokens", help="EOS is masked before this many "
                                       "tokens."),
        orders: str = typer.Option("2-99", "--orders", help="RDP orders, e.g. '2-99' or "
                                   "'1.5,2,4,8-16'."),
        *,
        common: CommonOptions,
    ) -> None:
        """Audit DP synthetic-text generation: ε_empirical vs target ε (paper 001 §5).

        Each token clips, averages and samples the next-token logits of s one-shot
        prompts (one private example each) at the temperature that meets the
        target ε in theory (Algorithm 3); its data-dependent loss comes from the
        remove-one neighbours. Paper setting: --subset-size 50 --n-gen 50
        --max-tokens 40 --target-eps 0.5,1,5,10,20,50,100 --label all

        --limit N generates only the first N sequences of each target (the
        accounting still plans for --n-gen); --resume finishes the run.
        """
        from ctxleak.methods.audit import load_private_data

        config = build_config(target_eps=target_eps, delta=delta, subset_size=subset_size,
                              clip=clip, temperature=temperature, n_gen=n_gen,
                              max_tokens=max_tokens, min_tokens=min_tokens, search=search,
                              orders=orders, label=label, template=template)
        examples = load_private_data(data, text_field=text_field, label_field=label_field,
                                     label=config.label)
        settings = plan(config, len(examples))
        run_config = {"data": data, "text_field": text_field, "label_field": label_field,
                      **config.as_dict()}
        _run(common, config, run_config, examples, settings, data)


def _run(common: CommonOptions, config: Any, run_config: dict[str, Any], examples: list[Any],
         settings: list[Any], data: str) -> None:
    from ctxleak.cli.session import is_main, load_lm, open_run, run_examples, say
    from ctxleak.methods.audit import audit_jobs, audit_sequence, summarise
    from ctxleak.methods.audit.report import build_report, figure6, token_rdp_plot
    from ctxleak.run.provenance import provenance

    t0 = time.time()
    from ctxleak.methods.audit.data import data_path

    run = open_run("audit", common, run_config, inputs={"data": data_path(data)})
    lm = load_lm(common)
    jobs = audit_jobs(settings, config.n_gen, common.limit)
    per = len(jobs) // len(settings)
    say(f"{len(examples)} private examples; {len(settings)} setting(s) x {per} sequence(s) of up "
        f"to {config.max_tokens} tokens, each from {settings[0].subset_size} one-shot prompts"
        if config.search != "subset_size" else
        f"{len(examples)} private examples; {len(settings)} setting(s) x {per} sequence(s)")
    with run:
        records = run_examples(run, jobs, key=lambda job: job.key,
                               work=lambda _, job: audit_sequence(lm, examples, job, config,
                                                                  common.seed),
                               desc="audit")
    if not is_main(run):
        return
    rows = summarise(settings, records, config)
    synthetic = [{"delta": r["delta"], "target_eps": r["target_eps"],
                  "temperature": r["temperature"], "clip": r["clip"],
                  "subset_size": r["subset_size"], "sequence": r["sequence"], "text": r["text"]}
                 for r in records]
    run.write_file("synthetic.jsonl", "".join(json.dumps(s, ensure_ascii=False) + "\n"
                                              for s in synthetic))
    plots = {"fig6_epsilon.png": figure6(rows), "token_rdp.png": token_rdp_plot(records, rows)}
    for name, png in plots.items():
        run.write_file(name, png)
    seconds = time.time() - t0
    summary = {"rows": rows, "search": config.search,
               "complete": all(r["complete"] for r in rows)}
    run.write_results(summary, provenance=provenance(lm, prompt_template=config.template),
                      n_effective=len(records))
    report = build_report(rows, records, config, plots, model=lm.info.name, data=data,
                          seconds=seconds)
    report.save(run.path / "report.html", mode=run.file_mode)
    _print(rows, config.search, run.path, seconds)


def _print(rows: list[dict[str, Any]], search: str, path: Any, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from ctxleak.methods.audit.report import table_rows

    console = Console()
    for delta in dict.fromkeys(r["delta"] for r in rows):
        part = [r for r in rows if r["delta"] == delta]
        headers, cells = table_rows(part, search, compact=True)
        first = part[0]
        fixed = {"temperature": f"s = {first['subset_size']}, c = {first['clip']:g}",
                 "clip": f"s = {first['subset_size']}, τ = {first['temperature']:g}",
                 "subset_size": f"c = {first['clip']:g}, τ = {first['temperature']:g}"}[search]
        table = Table(title=f"Privacy audit ({fixed}, δ = {delta:g}, N_gen = {first['n_gen']})")
        for h in headers:
            table.add_column(h, justify="right")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    console.print("ε_empirical: data-dependent RDP summed over all released tokens, Theorem C.8 "
                  "at α*, x2 (App. C.3.3); '> bound': tokens whose loss exceeds the paper's "
                  "per-token RDP at c/(sτ) (reported, not clamped); 'ε(0 loss)': ε_empirical "
                  "if no loss were measured (the conversion term alone).")
    if not all(r["complete"] for r in rows):
        console.print("incomplete: fewer sequences than --n-gen (--limit); rerun with --resume "
                      "to finish")
    console.print(f"results: {path / 'results.json'}   report: {path / 'report.html'}   "
                  f"texts: {path / 'synthetic.jsonl'}   ({seconds:.1f} s)")
