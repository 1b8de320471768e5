"""An ``--output`` that cannot become a folder says which part of the path is in the way: a
symbolic link to nothing (the link itself or a folder above), or a file above it; one line,
nothing loaded, nothing created."""

from __future__ import annotations

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import OutputError

BASE = ["influence", "--data", "demo", "--max-new-tokens", "2"]


@pytest.fixture
def no_model(monkeypatch):
    """Any model load is a failure of the test: the path is refused first."""
    import ctxleak.engine.models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad output was reported")

    monkeypatch.setattr(models, "load_model", refuse)


def _layout(tmp_path, case):
    """(the output to give, the part the message must name, words it must say)."""
    if case == "dangling-link":  # the example
        (tmp_path / "out").symlink_to(tmp_path / "gone")
        return tmp_path / "out", tmp_path / "out", ["symbolic link", str(tmp_path / "gone"),
                                                    "does not exist"]
    if case == "link-above":
        (tmp_path / "runs").symlink_to(tmp_path / "gone")
        return tmp_path / "runs" / "r1", tmp_path / "runs", ["symbolic link", "does not exist"]
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    return tmp_path / "notes.txt" / "r1", tmp_path / "notes.txt", ["is a file, not a folder"]


def _names(line, part):
    """Whether the message names ``part`` itself (not only as the start of the output)."""
    return f"{part} " in line or f"({part})" in line


@pytest.mark.parametrize("case", ["dangling-link", "link-above", "file-above"])
def test_the_part_in_the_way_is_named(case, no_model, tmp_path, capsys):
    output, part, words = _layout(tmp_path, case)
    code, _, err = run_cli(BASE + ["--output", str(output)], capsys)
    lines = [x for x in err.strip().splitlines() if not x.startswith("[ctxleak]")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert _names(lines[0], part) and all(w in lines[0] for w in words), lines[0]
    assert "File exists" not in lines[0] and "Not a directory" not in lines[0]
    assert not (tmp_path / "gone").exists()
    with pytest.raises(OutputError) as info:
        ctxleak.influence(data="demo", output=str(output), max_new_tokens=2)
    assert str(part) in str(info.value) and info.value.param == "output"
