"""``ctxleak icl``: ICLInf, the privacy loss of in-context exemplars (Evaluating Privacy Leakage
From In-Context Learning §3-4, App. B, E.1).

Flags -> :func:`ctxleak.iclinf` (which checks the data before loading the model and writes the
run directory) -> the printed summary.
"""

from __future__ import annotations

import functools
from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, with_common_options

#: typer.Option in each of the command's three help panels.
_DATA = functools.partial(typer.Option, rich_help_panel="Data")
_PROMPT = functools.partial(typer.Option, rich_help_panel="Prompt")
_METHOD = functools.partial(typer.Option, rich_help_panel="ICLInf")


def register(app: typer.Typer) -> None:
    @app.command("icl")
    @with_common_options
    def icl(
        common: CommonOptions,
        data: str = _DATA(
            "demo", "--data", "-d",
            help="Training data (the exemplar pool): a JSONL or CSV file of {text, label}, "
                 "'demo' (bundled four-topic news task) or hf:agnews|dbpedia|trec (needs the "
                 "'datasets' package and network)."),
        test_data: Optional[str] = _DATA(
            None, "--test-data",
            help="Queries: a JSONL or CSV file of {text, label}. Without it, lines of --data "
                 "whose --split field is 'test' are the queries."),
        split: str = _DATA(
            "split", "--split",
            help="Field of --data that says 'train' or 'test' (used without --test-data)."),
        text_field: str = _DATA("text", "--text-field", help="Name of the text field in the files."),
        label_field: str = _DATA("label", "--label-field",
                                 help="Name of the label field in the files."),
        labels: Optional[str] = _DATA(
            None, "--labels",
            help="Label verbalisers in order, 'World,Sports,...', or raw=name pairs "
                 "'0=World,1=Sports' (default: the format's labels, else those of the data)."),
        queries: int = _DATA(
            100, "--queries", "-q",
            help="Number of test queries (a seeded sample; all when the test set is smaller). "
                 "The paper uses 500."),
        format: str = _PROMPT(
            "auto", "--format",
            help="Prompt format of paper Table 2: agnews, dbpedia, trec, or custom; auto = the "
                 "dataset's own (demo: agnews), custom for files."),
        instruction: Optional[str] = _PROMPT(
            None, "--instruction",
            help="Instruction before the exemplars; '{labels}' becomes the label list; \\n for "
                 "newlines."),
        exemplar_template: Optional[str] = _PROMPT(
            None, "--exemplar-template",
            help="One exemplar, with {text} and {label} (default 'Article: {text}\\nAnswer: "
                 "{label}\\n\\n')."),
        query_template: Optional[str] = _PROMPT(
            None, "--query-template",
            help="The query, with {text} (default 'Article: {text}\\nAnswer:')."),
        max_text_tokens: int = _PROMPT(
            256, "--max-text-tokens",
            help="Cut longer texts to this many tokens (counted per query in samples.jsonl)."),
        shots: str = _METHOD(
            "4", "--shots", "-k",
            help="Exemplars per prompt; a comma list (1,2,4,8) runs a sweep into one run "
                 "directory."),
        calibration: Optional[str] = _METHOD(
            None, "--calibration",
            help="Contextual calibration (App. B) of every prompt, leave-one-out ones "
                 "included: off (default), on, or both (report with and without, Fig. 4). "
                 "Was also --calibrate (= on)."),
        calibration_eps: float = _METHOD(
            1e-6, "--calibration-eps",
            help="ε of W = diag(1/(p_cf + ε))."),
        output_space: str = _METHOD(
            "labels", "--output-space",
            help="labels (renormalised label distribution, as in the paper), vocab (full "
                 "next-token distribution, App. E.1) or both (Fig. 7)."),
        label_scoring: str = _METHOD(
            "first-token", "--label-scoring",
            help="first-token: each label's first token with its leading space (the paper); "
                 "full: the whole label string."),
    ) -> None:
        """ICLInf: how much each in-context exemplar changes the model's answer (Evaluating
        Privacy Leakage From In-Context Learning).

        For each query, draws SHOTS exemplars from the training data, scores the prompt with all
        of them and with each one left out, and reports the largest change in the log
        probability of any label (the data-dependent DP privacy loss), its mean ± std over
        queries, the accuracy and the loss by exemplar position.

        The prompts are completions in the format of the paper's Table 2 (ending in
        'Answer:'), so the model's chat template is used only with --chat-template on.

        Example:  ctxleak icl --data demo --shots 1,2,4 --calibration both --limit 10
        """
        from ctxleak.api import run_params
        from ctxleak.cli.output import show
        from ctxleak.methods.icl.params import ICLInfParams
        from ctxleak.run.runner import say

        params = ICLInfParams(test_data=test_data, split=split, text_field=text_field,
                              label_field=label_field, labels=labels, queries=queries, format=format,
                              instruction=instruction, exemplar_template=exemplar_template,
                              query_template=query_template, max_text_tokens=max_text_tokens,
                              shots=shots, calibration=calibration,
                              calibration_eps=calibration_eps, output_space=output_space,
                              label_scoring=label_scoring)
        result = run_params(params, common, data)
        if result is None:  # the other processes of a data-parallel run
            return
        if result.summary["truncated_texts"]:
            say(f"{result.summary['truncated_texts']} text(s) were cut to {max_text_tokens} "
                "tokens (--max-text-tokens)")
        show(result)
