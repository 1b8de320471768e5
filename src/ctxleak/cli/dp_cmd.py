"""``ctxleak dp``: theoretical privacy accounting for DP synthetic text (Evaluating Privacy Leakage
From In-Context Learning App. C).

``dp calibrate`` runs Algorithm 3 (find τ, c or s meeting each target ε); ``dp epsilon`` runs
Algorithm 2 (the ε of given parameters). No model is loaded.
"""

from __future__ import annotations

import json

import typer

_SEARCH = {"temperature": "temperature", "clip": "clip", "subset-size": "subset_size"}

_ORDERS_HELP = "RDP orders: ranges and numbers, e.g. '2-99' (integers 2..99) or '1.5,2,4,8-16'."
_DELTA_HELP = "δ of the (ε, δ)-DP guarantee, in (0, 1)."

# The mechanism's parameters: the same flags in both commands
_CLIP = typer.Option(10.0, "--clip", help="Logit clip bound c (1e-100 to 1e100).")
_SUBSET_SIZE = typer.Option(50, "--subset-size", help="Prompts per batch s (at least 1).")
_TEMPERATURE = typer.Option(2.0, "--temperature", help="Sampling temperature τ (1e-100 to 1e100).")
_SEQUENCES = typer.Option(50, "--sequences",
                          help="Number of generated sequences N_gen (1 to 1e9; was --n-gen).")
_MAX_NEW_TOKENS = typer.Option(40, "--max-new-tokens", help="Max new tokens per sequence T_max "
                               "(1 to 1e9; was --max-tokens).")


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) >= 1e4 or abs(x) < 1e-3 else f"{x:.4f}".rstrip("0").rstrip(".")


def register(app: typer.Typer) -> None:
    """Add the ``dp`` command group to ``app``."""
    dp_app = typer.Typer(name="dp", no_args_is_help=True,
                         help="Theoretical DP accounting for private synthetic-text generation "
                              "(clip, average and sample over s one-shot prompts).")

    @dp_app.command("calibrate")
    def calibrate_cmd(
        target_eps: str = typer.Option("0.5,1,5,10,20,50,100", "--target-eps",
                                       help="Target ε values, comma-separated (each at most "
                                            "709.78: beyond it e^ε overflows float64)."),
        delta: float = typer.Option(1e-5, "--delta", help=_DELTA_HELP),
        clip: float = _CLIP,
        subset_size: int = _SUBSET_SIZE,
        temperature: float = _TEMPERATURE,
        sequences: int = _SEQUENCES,
        max_new_tokens: int = _MAX_NEW_TOKENS,
        search: str = typer.Option("temperature", "--search",
                                   help="Parameter to solve for: temperature, clip or subset-size "
                                        "(the others stay fixed)."),
        orders: str = typer.Option("2-99", "--orders", help=_ORDERS_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Find the temperature (or clip, or subset size) that meets each target ε (Algorithm 3)."""
        from ctxleak.dp import calibrate

        results = calibrate(target_eps, delta, clip=clip, subset_size=subset_size,
                            temperature=temperature, sequences=sequences,
                            max_new_tokens=max_new_tokens,
                            search=search, orders=orders)
        if as_json:
            typer.echo(json.dumps([r.as_dict() for r in results], indent=2))
            return
        from rich.table import Table

        from ctxleak.cli.output import plain_output
        from ctxleak.report.console import console as make_console

        table = Table(title=f"Algorithm 3: {search} for each target ε  (δ={delta:g}, "
                            f"N_gen={sequences}, T_max={max_new_tokens})")
        for name in ("target ε", "temperature τ", "clip c", "subset size s", "α*", "ε theoretical"):
            table.add_column(name, justify="right")
        for r in results:
            cells = [_fmt(r.target_eps), _fmt(r.temperature), _fmt(r.clip), _fmt(r.subset_size),
                     _fmt(r.alpha), _fmt(r.eps)]
            col = 1 + list(_SEARCH).index(search)
            cells[col] = f"[bold]{cells[col]}[/bold]"
            table.add_row(*cells)
        make_console(plain_output()).print(table)

    @dp_app.command("epsilon")
    def epsilon_cmd(
        clip: float = _CLIP,
        subset_size: int = _SUBSET_SIZE,
        temperature: float = _TEMPERATURE,
        sequences: int = _SEQUENCES,
        max_new_tokens: int = _MAX_NEW_TOKENS,
        delta: float = typer.Option(1e-5, "--delta", help=_DELTA_HELP),
        orders: str = typer.Option("2-99", "--orders", help=_ORDERS_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Theoretical (ε, δ) of the given parameters and the optimal order α* (Algorithm 2)."""
        from ctxleak.dp import epsilon

        result = epsilon(clip, subset_size, temperature, sequences, max_new_tokens, delta, orders)
        eps, alpha = result["eps"], float(result["alpha"])
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        typer.echo(f"ε = {_fmt(eps)}  (δ = {delta:g}) at α* = {_fmt(alpha)}  "
                   f"[c={_fmt(clip)}, s={subset_size}, τ={_fmt(temperature)}, "
                   f"{sequences}×{max_new_tokens} tokens]")

    app.add_typer(dp_app, name="dp")
