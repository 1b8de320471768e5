"""``--help`` is readable in a pipe (issue 85): rich took 80 columns there and gave each flag's
help about 20; the CLI now asks for 120 unless COLUMNS or TERMINAL_WIDTH says otherwise."""

from __future__ import annotations

import os

from conftest import run_cli

from ctxleak.cli.app import HELP_COLUMNS


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_help_in_a_pipe_is_120_columns_wide(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    code, out, _ = run_cli(["influence", "--help"], capsys)
    assert code == 0 and widest(out) == HELP_COLUMNS == 120
    # the flag's help runs over one line of more than 40 characters, not a narrow column
    assert "'demo' (bundled set), 'demo-qa' (bundled questions whose" in out
    assert "COLUMNS" not in os.environ  # put back after the command


def test_a_width_the_user_set_is_kept(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    code, out, _ = run_cli(["influence", "--help"], capsys)
    assert code == 0 and widest(out) == 90
