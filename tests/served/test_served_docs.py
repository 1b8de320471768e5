"""The served-model commands of the README and of the served-models page run as written against
a real vLLM server: the documented server command is the one the tests start (tests/helpers/
vllm_server.py), the documented model folder is the default model's, and every block marked for
this test (its ``ci: skip`` reason names this file) runs against the session's server, its URL
put in place of the documented ``http://127.0.0.1:8000``."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from conftest import run_cli
from helpers.vllm_server import server_args

pytestmark = [pytest.mark.served, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "served-models.md"]
MARK = "tests/served/test_served_docs.py"
DOC_URL = "http://127.0.0.1:8000"
BLOCK = re.compile(r"<!-- ci: skip \((?P<why>[^)]+)\) -->\n^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```",
                   re.S | re.M)


def marked_blocks() -> list[tuple[str, str, str]]:
    """(page, language, code) of every block whose skip reason names this test."""
    return [(page.name, m["lang"], m["code"]) for page in PAGES
            for m in BLOCK.finditer(page.read_text(encoding="utf-8")) if MARK in m["why"]]


def commands(code: str) -> list[str]:
    """A bash block's commands, continuation lines joined."""
    out: list[str] = []
    for line in code.splitlines():
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            out.append(line.rstrip())
    return out


def is_server_block(code: str) -> bool:
    return "vllm.entrypoints.openai.api_server" in code


def test_both_pages_mark_their_server_command_and_a_run():
    for name in ("README.md", "served-models.md"):
        mine = [(lang, code) for page, lang, code in marked_blocks() if page == name]
        assert any(is_server_block(code) for _, code in mine), name
        assert any("--server-url" in code or "server_url" in code for _, code in mine), name


def test_the_documented_server_command_is_the_one_the_tests_start(default_dir):
    """The server line gives the tests' arguments (``--port 8000`` for the tests' free port),
    and the documented ``DIR=$(...)`` line prints the default model's folder."""
    seen = 0
    for page, _, code in marked_blocks():
        if not is_server_block(code):
            continue
        lines = commands(code)
        directory = next(line for line in lines if line.startswith("DIR="))
        snippet = re.fullmatch(r'DIR=\$\(\S+/python -c "(?P<py>[^"]+)"\)', directory)
        assert snippet, f"{page}: {directory}"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # the snippet in-process: the same Python
            exec(snippet["py"], {})  # noqa: S102 - our own docs
        assert printed.getvalue().strip() == default_dir
        server = shlex.split(next(line for line in lines if "api_server" in line))
        # the docs give the model every core (a machine of its own); the tests' server shares
        # two cores with the test workers, so it keeps vLLM's default of one for its scheduler
        assert server[:2] == ["VLLM_CPU_KVCACHE_SPACE=2", "VLLM_CPU_NUM_OF_RESERVED_CPU=0"], page
        assert server[2].endswith("/python"), page
        assert server[3:] == server_args("$DIR", 8000), page
        seen += 1
    assert seen == 2


def test_the_documented_runs_work_against_the_server(vllm_server, tmp_path, monkeypatch, capsys):
    """Every marked ctxleak command and Python block runs against the session's server (exit
    status 0; the Python blocks' results are checked by what they print). Commands run
    in-process through the CLI's entry point (the console script itself is run once, by
    tests/cli/test_console_script.py)."""
    monkeypatch.chdir(tmp_path)
    ran: set[str] = set()
    namespace: dict = {"__name__": "docs"}
    for page, lang, code in marked_blocks():
        if is_server_block(code):
            continue
        code = code.replace(DOC_URL, vllm_server.url)
        if lang == "python":
            exec(compile(code, page, "exec"), namespace)  # noqa: S102 - our own docs
            continue
        for cmd in commands(code):
            if cmd in ran:  # the README's command again on the served-models page
                continue
            ran.add(cmd)
            words = shlex.split(cmd)
            assert re.fullmatch(r"(\S*/)?ctxleak", words[0]), f"{page}: {cmd}"
            status, out, err = run_cli(words[1:], capsys)
            assert status == 0, f"{page}: {cmd}\n{out}\n{err}"
            assert "results" in out, f"{page}: {cmd}\n{out}"
    assert ran, "no ctxleak command was run"
