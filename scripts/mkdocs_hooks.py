"""mkdocs hook: the CLI reference page is generated from the commands themselves.

``docs/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it with the
``--help`` of every ``ctxleak`` command and subcommand, as the terminal shows it (80 columns,
no colour), so the page cannot drift from the flags. Used by ``mkdocs.yml`` (``hooks:``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

MARKER = "<!-- cli-reference -->"


class _LazyAll(logging.Filter):
    """``ctxleak.__all__`` lists the lazy API names from the registry (``*API``), which griffe's
    static reading cannot expand: that one warning is expected, every other one still fails
    ``mkdocs build --strict``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Unsupported item in ctxleak.__all__" not in record.getMessage()


for _name in ("griffe", "mkdocs.plugins.griffe", "mkdocs.plugins.mkdocstrings"):
    logging.getLogger(_name).addFilter(_LazyAll())
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _commands(group, path=()):
    """(path, click command) for the group and every command below it, depth first."""
    yield path, group
    for name, cmd in getattr(group, "commands", {}).items():
        yield from _commands(cmd, (*path, name))


def cli_reference() -> str:
    """Markdown: one section per command with its ``--help`` text."""
    import typer
    from typer.testing import CliRunner

    from ctxleak.cli.app import app

    os.environ.update({"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "80"})
    root = typer.main.get_command(app)
    runner = CliRunner()
    parts = []
    for path, _cmd in _commands(root):
        args = [*path, "--help"]
        out = runner.invoke(app, args, terminal_width=80, env={"COLUMNS": "80"}).output
        name = " ".join(("ctxleak", *path))
        parts.append(f"## `{name}`\n\n```text\n$ {name} --help\n{out.rstrip()}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - mkdocs API
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
