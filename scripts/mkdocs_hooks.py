"""mkdocs hooks (``mkdocs.yml``, ``hooks:``): the CLI reference, and the maths served offline.

- ``docs/cli.md`` holds the marker ``<!-- cli-reference -->``; it is replaced with the ``--help``
  of every ``ctxleak`` command and subcommand, as the terminal shows it (80 columns, no colour),
  so the page cannot drift from the flags.
- The formulas are typeset by MathJax 3 loaded from the site itself, never from a CDN: auditors
  often read these docs on closed networks, where a CDN script leaves raw LaTeX. After the build,
  the MathJax files the pages need are copied from the ``django-static-mathjax`` package (the dev
  extra; MathJax's own ``es5`` build) into ``<site>/mathjax/``, the folder ``extra_javascript``
  names.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
from pathlib import Path

MARKER = "<!-- cli-reference -->"
#: Where the MathJax files go in the built site (``extra_javascript`` loads
#: ``mathjax/tex-mml-chtml.js``; MathJax finds the rest relative to that script).
MATHJAX_DIR = "mathjax"
#: What the ``tex-mml-chtml`` component loads: itself, the CHTML output's web fonts, and what it
#: fetches on demand from its loader's paths (TeX and MathML extensions, by ``\require`` or
#: autoload; the context menu; the accessibility extensions and the speech rule engine's maps
#: that the menu can switch on).
MATHJAX_FILES = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions",
                 "input/mml", "ui", "a11y", "sre")


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


def mathjax_source() -> Path:
    """MathJax 3's ``es5`` folder inside the installed ``django-static-mathjax`` package."""
    spec = importlib.util.find_spec("mathjax")
    origin = spec.origin if spec is not None else None
    es5 = Path(origin).parent / "static" / "mathjax" / "es5" if origin else None
    if es5 is None or not (es5 / "tex-mml-chtml.js").is_file():
        raise RuntimeError("MathJax 3 is not installed: the docs serve it from the site itself "
                           "(pip install django-static-mathjax, in the dev extra)")
    return es5


def copy_mathjax(site_dir: str | Path) -> Path:
    """Copy :data:`MATHJAX_FILES` from the installed MathJax into ``<site_dir>/mathjax``."""
    source, target = mathjax_source(), Path(site_dir) / MATHJAX_DIR
    for name in MATHJAX_FILES:
        src, dst = source / name, target / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
    return target


def on_post_build(config) -> None:
    copy_mathjax(config["site_dir"])

