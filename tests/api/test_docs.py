"""Every code block of the README and of the documentation pages (docs/*.md) runs as written.

Python blocks run in order, one namespace per page, in a fresh working directory. Shell blocks
(``bash``, and the ``$ `` lines of ``console`` blocks) run their commands in a fresh working
directory per page, in-process through the CLI's entry point (``ctxleak.cli.app.main``, the
console script's target) on the session's default model; what they print is not compared (it
holds timings), their exit status must be 0. A block that cannot run in CI (the
setup script, several GPUs, hours of compute) is marked on the line before it with
``<!-- ci: skip (the reason) -->``. Blocks in ``text``, ``bibtex`` (checked against
``ctxleak.citations``), ``json`` and unlabelled fences are shown, not run. The README's Python API blocks
and the CID page's blocks have their own tests (tests/api/test_readme.py,
tests/integrations/test_readme_cid.py), and a command shown on two pages runs once: nothing runs
twice.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import run_cli

from ctxleak.citations import PAPERS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?:<!-- ci: skip \((?P<why>[^)]+)\) -->\n)?^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```",
                   re.S | re.M)
RUN = {"python", "bash", "console"}
SHOW = {"text", "bibtex", "json", ""}
#: Pages whose Python blocks another test runs (the same code is not run twice in CI): the README's
#: and the tutorial's, the same blocks, are the cells of examples/api.ipynb
#: (tests/api/test_notebook.py), and the CID page's (tests/integrations/test_readme_cid.py).
PYTHON_ELSEWHERE = {"README.md", "integration.md", "tutorial.md"}
#: Shell commands already run in this session: a command shown on two pages (the README's example
#: and its method's page) runs once.
RAN: set[str] = set()


def _feeds_later(cmd: str, page_commands: str) -> bool:
    """Whether ``cmd`` writes (``--output PATH``) something another command of the same page
    reads: it then runs again on this page, whose working directory is its own."""
    out = re.search(r"--output\s+(\S+)", cmd)
    return bool(out) and page_commands.count(out[1]) > 1


def blocks(page: Path) -> list[tuple[str, str, str | None]]:
    """(language, code, skip reason or None) of each fenced block of ``page``."""
    text = page.read_text(encoding="utf-8")
    return [(m["lang"], m["code"], m["why"]) for m in BLOCK.finditer(text)]


def commands(lang: str, code: str) -> list[str]:
    """The shell commands of a block: every line of a bash block (comments and continuations
    joined), the ``$ `` lines of a console block."""
    lines = code.splitlines()
    if lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    out: list[str] = []
    for line in lines:
        line = line.split("  # ")[0].rstrip() if "  # " in line else line.rstrip()
        if not line or line.lstrip().startswith("#"):
            continue
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
        else:
            out.append(line)
    return out


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_block_is_known_and_every_skip_says_why():
    for page in PAGES:
        for lang, code, why in blocks(page):
            assert lang in RUN | SHOW, f"{page_id(page)}: unknown block language {lang!r}"
            if why is not None:
                assert lang in RUN and len(why.strip()) > 10, (page_id(page), why)
            if lang in ("bash", "console") and why is None:
                for cmd in commands(lang, code):
                    assert re.match(r"^(OMP_NUM_THREADS=\d+ )?ctxleak\b", cmd), (
                        f"{page_id(page)}: a shell command that is not ctxleak's must be marked "
                        f"<!-- ci: skip (reason) -->: {cmd}")


def test_the_docs_bibtex_is_ctxleaks_own():
    """A BibTeX entry shown in the docs is, character for character, the one in
    ``ctxleak.citations`` (the one results.json and the reports carry)."""
    seen = 0
    for page in PAGES:
        for lang, code, _ in blocks(page):
            if lang != "bibtex":
                continue
            for entry in re.split(r"\n(?=@)", code.strip()):
                key = entry.split("{", 1)[1].split(",", 1)[0]
                assert key in PAPERS, (page_id(page), key)
                assert entry.strip() == PAPERS[key].bibtex, (page_id(page), key)
                seen += 1
    assert seen >= 4


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_code_blocks_of_a_page_run(page, tmp_path, monkeypatch, capsys):
    todo = [(lang, code) for lang, code, why in blocks(page) if lang in RUN and why is None]
    if page.name in PYTHON_ELSEWHERE:
        todo = [(lang, code) for lang, code in todo if lang != "python"]
    if not todo:
        pytest.skip("no block to run on this page")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs"}
    later = " ".join(cmd for lang, code in todo if lang != "python" for cmd in commands(lang, code))
    for lang, code in todo:
        if lang == "python":
            exec(compile(code, str(page), "exec"), namespace)  # noqa: S102 - our own docs
            continue
        for cmd in commands(lang, code):
            if cmd in RAN and not _feeds_later(cmd, later):
                continue
            RAN.add(cmd)
            code_, out, err = run_cli(cli_argv(cmd), capsys)
            assert code_ == 0, f"{page_id(page)}: {cmd}\n{out}\n{err}"


def cli_argv(cmd: str) -> list[str]:
    """The arguments of a documented ``ctxleak ...`` command line, run in-process through the
    CLI's entry point (tests/cli/test_console_script.py runs the console script itself). An
    ``OMP_NUM_THREADS=N`` prefix is dropped: it sets a thread count, no result."""
    words = [w for w in shlex.split(cmd) if not w.startswith("OMP_NUM_THREADS=")]
    assert words[0] == "ctxleak", cmd
    return words[1:]
