"""A YAML config (``ctxleak run CONFIG`` and ``--config FILE``) that uses anchors and aliases is
refused at once, in one line naming the file and the line: nested aliases make a kilobyte of
YAML stand for billions of values ("billion laughs")."""

from __future__ import annotations

import time

import pytest
from conftest import run_cli


def _bomb(levels: int = 9) -> str:
    """Each level a list of nine aliases of the one before: 9**levels strings from ~1 KB."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


CASES = {
    # the example: nested list anchors, the last one a flag's value
    "list-bomb": "command: influence\n" + _bomb() + "max-new-tokens: *a8\n",
    # one scalar anchored and reused by another flag
    "scalar": "command: influence\nlimit: &n 0\nmax-new-tokens: *n\n",
}
ALIAS = {"list-bomb": "alias *a0", "scalar": "alias *n"}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("how", ["run", "--config"])
def test_aliases_are_refused_naming_the_file(case, how, tmp_path, capsys):
    path = tmp_path / f"{case}.yaml"
    text = CASES[case] if how == "run" else CASES[case].replace("command: influence\n", "")
    path.write_text(text, encoding="utf-8")
    argv = ["run", str(path)] if how == "run" else ["influence", "--config", str(path)]
    start = time.monotonic()
    code, _, err = run_cli(argv, capsys)
    assert time.monotonic() - start < 5
    assert code == 2 and "Traceback" not in err, err
    assert str(path) in err and ALIAS[case] in err and len(err.strip().splitlines()) == 1, err


def test_a_plain_config_still_loads(tmp_path):
    from ctxleak.cli.config import load_config_file

    path = tmp_path / "ok.yaml"
    path.write_text("max-new-tokens: 4\nlambda: [0.5, 1]\nname: 'a & b * c'\n", encoding="utf-8")
    assert load_config_file(path) == {"max-new-tokens": 4, "lambda": "0.5,1", "name": "a & b * c"}
