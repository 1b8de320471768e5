"""Every config in examples/ names a real command and only flags that command has."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxleak.cli.app import nest_defaults
from ctxleak.cli.config import load_config_file
from ctxleak.errors import ConfigError

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_is_valid(path):
    """Each flag reaches its parameter with its value, converted by the flag's own type (click
    parses the config as the command's defaults, exactly as ``ctxleak run`` does)."""
    import typer

    from ctxleak.cli.app import app

    values = load_config_file(path)
    command = values.pop("command").split()
    nested = nest_defaults(command, values)
    click_command, node = typer.main.get_command(app), nested
    for word in command:
        click_command, node = click_command.commands[word], node[word]
    assert list(nested) == [command[0]] and len(node) == len(values)
    params = click_command.make_context(" ".join(command), [], default_map=node).params
    for flag, value in values.items():
        name = next(p.name for p in click_command.params
                    if p.name == flag.replace("-", "_") or
                    any(o.lstrip("-") == flag for o in getattr(p, "opts", [])))
        expected = ",".join(str(v) for v in value) if isinstance(value, list) else value
        assert params[name] == type(params[name])(expected), (path.name, flag)


def test_unknown_flag_in_config_is_an_error():
    with pytest.raises(ConfigError, match="unknown flag 'lamda'.*did you mean 'lambda'"):
        nest_defaults(["influence"], {"lamda": 1})
    with pytest.raises(ConfigError, match="unknown flag 'max-new-token'.*did you mean "
                                          "'max-new-tokens'"):
        nest_defaults(["influence"], {"max-new-token": 4})
    with pytest.raises(ConfigError, match="unknown command"):
        nest_defaults(["nope"], {})


def test_every_paper_has_an_example():
    """SPEC §1: examples/ reproduces each paper's experiments (000, 001 ICLInf and audit,
    002, 004)."""
    commands = {load_config_file(p)["command"] for p in EXAMPLES}
    assert commands >= {"influence", "icl", "audit", "dp calibrate", "susceptibility", "probe"}


def test_config_file_typo_suggests_the_flag(tmp_path, capsys):
    """A YAML key that is no flag: one line, exit 2, the closest flag suggested; nothing runs."""
    from conftest import run_cli

    config = tmp_path / "run.yaml"
    config.write_text("command: influence\ndata: demo\nlamda: 0.5\n")
    code, _, err = run_cli(["influence", "--config", str(config),
                            "--output", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown flag 'lamda'" in err and "did you mean 'lambda'?" in err
    assert not (tmp_path / "run").exists()
