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
    values = load_config_file(path)
    command = values.pop("command").split()
    nested = nest_defaults(command, values)
    assert nested


def test_unknown_flag_in_config_is_an_error():
    with pytest.raises(ConfigError, match="unknown flag 'lamda'"):
        nest_defaults(["influence"], {"lamda": 1})
    with pytest.raises(ConfigError, match="unknown command"):
        nest_defaults(["nope"], {})


def test_examples_exist():
    assert len(EXAMPLES) >= 5
