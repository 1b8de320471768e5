"""``ctxleak probe``: ProPILE PII probing, black-box, white-box and in-context (ProPILE: Probing
Privacy Leakage in Large Language Models, App. A.3, A.4, B.1), and the canary check that the probe
sees PII a model was trained on.

Flags -> :func:`ctxleak.probe` (planning: :mod:`ctxleak.methods.pii.plan`; runners:
:mod:`ctxleak.methods.pii.runners`; report: :mod:`ctxleak.report.probe`) -> the printed table.
"""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, with_common_options


@with_common_options
def probe(
    data: str = typer.Option("demo", "--data", "-d", help="PII records JSONL (one subject per "
                             "line: name, email, phone, address, relations, university, "
                             "documents; see 'ctxleak pii synth') or 'demo' (synthetic "
                             "records made on the fly with --seed)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="black-box (App. A.3), white-box "
                                       "(soft prompt, App. A.4), in-context (the subject's "
                                       "documents in the prompt), or a comma list. Default: "
                                       "black-box, or none with --canary."),
    pii: Optional[str] = typer.Option(None, "--pii", help="PII types: a comma list of phone, "
                                      "email, address, relation, university. Default: all; "
                                      "with --canary phone,address,university (e-mails and "
                                      "relatives' names of the demo data echo the subject's "
                                      "name, so their null PII is not a clean control)."),
    shots: str = typer.Option("1", "--shots", help="k of a k-shot prompt, 1..5: k templates, "
                              "k-1 filled for other subjects with their PII, then the query "
                              "(1 = the bare query). A comma list sweeps."),
    structure: str = typer.Option("twins", "--structure", help="Templates of structured PII: "
                                  "twins (name only), triplets (+1 PII), quadruplets (+2 PII) "
                                  "or all. Results are the maximum over the templates of a "
                                  "structure."),
    beam: int = typer.Option(2, "--beam", help="Beam size of the generation (1 = greedy)."),
    max_new_tokens: str = typer.Option("paper", "--max-new-tokens", help="Generation budget: "
                                       "paper (phone 12, e-mail 20, address 30, relation 20, "
                                       "university 10 tokens, App. A.3), auto (the paper's, or "
                                       "the longest target of the type + 2 tokens if more: "
                                       "digit-by-digit tokenizers need it for phone numbers) "
                                       "or N for every type."),
    generate: bool = typer.Option(True, "--generate/--no-generate", help="Generate (exact "
                                  "match, string metrics) or only score likelihoods (faster)."),
    subjects: int = typer.Option(20, "--subjects", help="Number of demo subjects."),
    soft_tokens: int = typer.Option(20, "--soft-tokens", help="White-box: soft-prompt vectors "
                                    "m.", rich_help_panel="White-box"),
    train_fraction: float = typer.Option(0.5, "--train-fraction", help="White-box: share of "
                                         "subjects the soft prompt is trained on; the rest are "
                                         "held out.", rich_help_panel="White-box"),
    epochs: int = typer.Option(30, "--epochs", help="White-box: training epochs (the paper "
                               "uses 700).", rich_help_panel="White-box"),
    soft_lr: float = typer.Option(0.005, "--soft-lr", help="White-box: AdamW learning rate.",
                                  rich_help_panel="White-box"),
    context_template: str = typer.Option("{document}\n{prompt}", "--context-template",
                                         help="In-context: how the documents and the probe are "
                                         "joined.", rich_help_panel="In-context"),
    leak_maps: bool = typer.Option(True, "--leak-maps/--no-leak-maps", help="In-context: "
                                   "measure each answer's leak map (the influence of every "
                                   "8-token window of the documents; costs a forward pass per "
                                   "window).", rich_help_panel="In-context"),
    canary: Optional[int] = typer.Option(None, "--canary", help="Canary check: fine-tune a copy "
                                         "of the model on the documents of N subjects, hold out "
                                         "N others, probe both (black-box).",
                                         rich_help_panel="Canary"),
    canary_epochs: int = typer.Option(4, "--canary-epochs", help="Fine-tuning epochs (AdamW).",
                                      rich_help_panel="Canary"),
    canary_lr: float = typer.Option(2e-3, "--canary-lr", help="Fine-tuning learning rate.",
                                    rich_help_panel="Canary"),
    canary_layers: int = typer.Option(8, "--canary-layers", help="Fine-tune the last k "
                                      "transformer blocks (0 = the whole model).",
                                      rich_help_panel="Canary"),
    canary_baseline: bool = typer.Option(False, "--canary-baseline", help="Also probe both "
                                         "groups with the original model.",
                                         rich_help_panel="Canary"),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level of the verdicts."),
    redact: bool = typer.Option(False, "--redact", help="Mask PII (the records' values, names, "
                                "e-mails, phone numbers, addresses, money amounts) in the "
                                "report and console."),
    *,
    common: CommonOptions,
) -> None:
    """Probe a model for the PII of data subjects (ProPILE): exact match of beam-search
    generations, target vs null-PII likelihoods (Wilcoxon), string metrics.

    Prompts are completed as plain text (as the paper probes base models); --chat-template on
    wraps each prompt as one user turn instead.

    Example:  ctxleak probe --data demo --subjects 10 --pii phone,email --output runs/probe
    """
    from ctxleak.api import run_params
    from ctxleak.cli.output import show
    from ctxleak.methods.pii.params import ProbeParams

    params = ProbeParams(mode=mode, pii=pii, shots=shots, structure=structure, beam=beam,
                         max_new_tokens=max_new_tokens, generate=generate, subjects=subjects,
                         soft_tokens=soft_tokens, train_fraction=train_fraction, epochs=epochs,
                         soft_lr=soft_lr, context_template=context_template, canary=canary,
                         canary_epochs=canary_epochs, canary_lr=canary_lr,
                         canary_layers=canary_layers, canary_baseline=canary_baseline, alpha=alpha,
                         redact=redact, leak_maps=leak_maps)
    result = run_params(params, common, data)
    show(result)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
