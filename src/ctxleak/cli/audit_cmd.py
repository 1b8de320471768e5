"""``ctxleak audit``: audit DP synthetic-text generation (Evaluating Privacy Leakage From In-Context
Learning §5, App. C).

Flags -> :func:`ctxleak.audit`, which checks every input and calibrates every target (Algorithm
3, pure maths) before the model is loaded -> the printed tables. The run directory gets
``samples.jsonl`` (one line per generated sequence per target and δ, with its per-token
data-dependent RDP), ``synthetic.jsonl`` (the texts), ``results.json``, ``report.html`` and the
plots.
"""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, generation_option, with_common_options


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
        temperature: float = generation_option(
            "--temperature", 2.0, " τ, one value: fixed when --search is clip or subset-size "
            "(paper: 2), the search's start otherwise (the calibration sets τ per target ε)."),
        search: str = typer.Option("temperature", "--search", help="Parameter calibrated to each "
                                   "target ε (Tables 4, 5, 6): temperature, clip or subset-size."),
        target_eps: str = typer.Option("1,10,100", "--target-eps", help="Target ε values, "
                                       "comma-separated (paper: 0.5,1,5,10,20,50,100)."),
        delta: str = typer.Option("1e-5", "--delta", help="δ values in (0, 1), comma-separated; "
                                  "one line each in the plot (Fig. 6)."),
        sequences: int = typer.Option(4, "--sequences", help="Sequences generated per target "
                                      "ε, N_gen (paper: 50; was --n-gen)."),
        max_new_tokens: int = typer.Option(24, "--max-new-tokens", help="Max new tokens per "
                                           "sequence T_max (paper: 40; was --max-tokens)."),
        min_new_tokens: int = generation_option("--min-new-tokens", 0, " (was --min-tokens)."),
        orders: str = typer.Option("2-99", "--orders", help="RDP orders, e.g. '2-99' or "
                                   "'1.5,2,4,8-16'."),
        *,
        common: CommonOptions,
    ) -> None:
        """Audit DP synthetic-text generation: ε_empirical vs target ε (Evaluating Privacy
        Leakage From In-Context Learning, §5).

        Each token clips, averages and samples the next-token logits of s one-shot
        prompts (one private example each) at the temperature that meets the
        target ε in theory (Algorithm 3); its data-dependent loss comes from the
        remove-one neighbours. Paper setting: --subset-size 50 --sequences 50
        --max-new-tokens 40 --target-eps 0.5,1,5,10,20,50,100 --label all

        --limit N generates only the first N sequences of each target (the
        accounting still plans for --sequences); --resume finishes the run.
        """
        from ctxleak.api import run_params
        from ctxleak.cli.output import show
        from ctxleak.methods.audit.method import AuditParams

        params = AuditParams(text_field=text_field, label_field=label_field, label=label,
                             template=template, subset_size=subset_size, clip=clip,
                             temperature=temperature, search=search, target_eps=target_eps,
                             delta=delta, sequences=sequences, max_new_tokens=max_new_tokens,
                             min_new_tokens=min_new_tokens, orders=orders)
        result = run_params(params, common, data)
        show(result)
