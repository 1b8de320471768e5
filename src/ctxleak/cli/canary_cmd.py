"""``ctxleak canary``: an attack's empirical ε lower bound beside bounded Context Influence
Decoding's guarantee, by membership inference with planted canaries (Auditing Differentially
Private Machine Learning: How Private is Private SGD?)."""

from __future__ import annotations

from typing import Optional

import typer

from ctxleak.cli.options import CommonOptions, api_options, generation_option, with_common_options


@with_common_options
def canary(
    data: str = typer.Option("demo-qa", "--data", "-d", help="The documents the canaries are "
                             "planted in, used in turn: 'demo-qa' (bundled) or a JSONL/CSV "
                             "file with a context field."),
    lambda_: float = generation_option("--lambda", 1.0, " (the upper bound of λ_t with --bounded-eps)."),
    temperature: float = generation_option("--temperature", 0.8, " > 0."),
    bounded_eps: Optional[float] = typer.Option(None, "--bounded-eps", help="Bounded CID: ε-DP "
                                                "per released token (App. B); without it, "
                                                "plain CID, which has no guarantee."),
    max_new_tokens: int = generation_option("--max-new-tokens", 8, " of each response."),
    min_new_tokens: Optional[int] = generation_option("--min-new-tokens", None,
                                                      " (default: --max-new-tokens)."),
    trials: int = typer.Option(40, "--trials", "-n", help="Canary trials (half choose the "
                               "threshold, half measure the rates)."),
    digits: int = typer.Option(6, "--digits", help="Digits of each random canary."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence of the ε lower "
                                     "bound."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="A score threshold "
                                              "fixed in advance (characters of the canary "
                                              "repeated); every trial then measures."),
    *,
    common: CommonOptions,
) -> None:
    """Audit CID with canaries: the ε an attack demonstrates beside the guarantee (Auditing
    Differentially Private Machine Learning: How Private is Private SGD?).

    Plants random canaries in documents (or another canary, by a recorded coin), generates by
    CID under one setting, scores each response alone, and gives the attack's ε lower bound at
    95 % confidence beside the guarantee (bounded CID: ε per token summed over the released
    tokens). The lower bound never exceeding the guarantee is the law; 'violated' means the
    mechanism is not as private as it claims.

    Example:  ctxleak canary --bounded-eps 2 --trials 40 --output runs/canary
    """
    from ctxleak.api import canary_audit
    from ctxleak.cli.output import show

    result = canary_audit(common.model, data, **api_options(common), lambda_=lambda_,
                          temperature=temperature, bounded_eps=bounded_eps,
                          max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                          trials=trials, digits=digits, confidence=confidence,
                          threshold=threshold)
    show(result)


def register(app: typer.Typer) -> None:
    app.command("canary")(canary)
