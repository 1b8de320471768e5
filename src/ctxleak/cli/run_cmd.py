"""``ctxleak run CONFIG.yaml``: run the command a config file names, with its flags."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("run", context_settings={"allow_extra_args": True,
                                          "ignore_unknown_options": True})
    def run(ctx: typer.Context,
            config: str = typer.Argument(..., help="YAML file with 'command:' (e.g. influence "
                                         "or 'dp calibrate') and that command's flags.")) -> None:
        """Run a config file: its 'command' key names the command, every other key is a flag.
        Extra flags after the file override the file."""
        from ctxleak.cli.app import app as root
        from ctxleak.cli.app import nest_defaults, rename_flags
        from ctxleak.cli.config import load_config_file
        from ctxleak.errors import ConfigError

        values = load_config_file(config)
        command = values.pop("command", None)
        if not command:
            raise ConfigError(f"{config}: the config needs a 'command' key, e.g. "
                              "'command: influence'")
        path = str(command).split()
        root(args=rename_flags(path + list(ctx.args)), prog_name="ctxleak",
             default_map=nest_defaults(path, values), standalone_mode=False)
