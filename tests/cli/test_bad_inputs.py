"""Bad input, command by command (SPEC §9, issue 15): exit status 2, one line on stderr that
names the file, line and field (or the flag), and no model loaded (``load_model`` is replaced by
one that fails the test if it is ever called)."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import run_cli
from helpers.tiny_data import TINY_RELATIONS

from ctxleak.run.rundir import RunDir


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """Any model load is a failure of the test: every check must come first."""
    import ctxleak.engine.models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(models, "load_model", refuse)


@pytest.fixture
def files(tmp_path):
    """Bad data files, by name -> path (as a string)."""
    out = {}

    def put(name, data: bytes | str):
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        out[name] = str(path)

    ok = '{"id": "a", "context": "some text", "query": "q?"}\n'
    put("bad_utf8.jsonl", ok.encode() + b'{"id": "b", "context": "caf\xe9", "query": "q"}\n')
    put("control.jsonl", ok + '{"id": "b", "context": "a\tb", "query": "q"}\n')
    put("dup_id.jsonl", ok + '{"id": "b", "context": "x", "query": "q"}\n' + ok)
    put("dup_key.jsonl", '{"id": "a", "context": "x", "context": "y", "query": "q"}\n')
    put("long.jsonl", ok + json.dumps({"id": "b", "context": "word " * 100, "query": "q"}) + "\n")
    put("dup.yaml", "limit: 1\nmax-new-tokens: 4\nlimit: 2\n")
    put("records.csv", "name,phone\nann,123\n")
    put("empty_doc.jsonl", json.dumps({"name": "ann", "phone": "one two",
                                       "documents": [""]}) + "\n"
        + json.dumps({"name": "bob", "phone": "two three", "documents": ["bob text"]}) + "\n")
    relations = copy.deepcopy(TINY_RELATIONS)
    relations["relations"][0]["entities"].append({"entity": "france", "answer": "paris"})
    put("dup_entity.json", json.dumps(relations))
    put("icl.jsonl", "".join(json.dumps({"text": t, "label": lab, "split": s}) + "\n"
                             for t, lab, s in [("a b", "yes", "train"), ("c d", "no", "train"),
                                               ("e f", "yes", "test")]))
    (tmp_path / "folder").mkdir()
    out["folder"] = str(tmp_path / "folder")
    other = tmp_path / "influence-run"
    RunDir(other, {"command": "influence", "data": "demo"}).append_sample({"id": "x"})
    out["influence-run"] = str(other)
    return out


# (argv, substrings the single error line must contain); {name} is a path from ``files``
CASES = {
    "influence": [
        (["--limit", "-1"], ["--limit", "at least 1", "-1"]),
        (["--limit", "0"], ["--limit", "at least 1"]),
        (["--lambda="], ["--lambda needs at least one value"]),
        (["--temperature", ","], ["--temperature needs at least one value"]),
        (["--lambda", "inf"], ["--lambda", "finite"]),
        (["--lambda", "-1"], ["--lambda must be >= 0"]),
        (["--lambda", "1,0.5,1"], ["--lambda lists 1 twice"]),
        (["--batch-size", "0"], ["--batch-size", "at least 1"]),
        (["--batch-size", "-1"], ["--batch-size", "at least 1"]),
        (["--batch-size", "nan"], ["--batch-size", "'nan'"]),
        (["--batch-size", "inf"], ["--batch-size", "'inf'"]),
        (["--batch-size", "abc"], ["--batch-size", "'abc'"]),
        (["--batch-size", "1.5"], ["--batch-size", "'1.5'"]),
        (["--batch-size", "0", "--ngram", "4"], ["--batch-size"]),
        (["--threads", "0"], ["--threads", "at least 1"]),
        (["--ngram", "4", "--stride", "0"], ["--stride", "at least 1"]),
        (["--ngram", "4", "--stride", "-3"], ["--stride", "at least 1"]),
        (["--template", "{context} {bogus}"], ["--template", "{bogus}"]),
        (["--template", "{context"], ["--template", "not a valid template"]),
        (["--context-sizes", "0"], ["--context-sizes"]),
        (["--bounded-eps", "none,-2"], ["--bounded-eps", "'-2'", "none"]),
        (["--repeat-threshold", "nan"], ["--repeat-threshold", "finite"]),
        (["--rouge-threshold", "2"], ["--rouge-threshold", "must be a number from 0 to 1, got 2"]),
        (["--data", "{folder}"], ["{folder}", "is a folder"]),
        (["--data", "{bad_utf8.jsonl}"], ["{bad_utf8.jsonl}:2", "not UTF-8"]),
        (["--data", "{control.jsonl}"], ["{control.jsonl}:2", "not valid JSON",
                                         "control character at column"]),
        (["--data", "{dup_id.jsonl}"], ["{dup_id.jsonl}:3", "field 'id'", "duplicate id"]),
        (["--data", "{dup_key.jsonl}"], ["{dup_key.jsonl}:1", "field 'context'", "twice"]),
        (["--data", "{long.jsonl}"], ["{long.jsonl}:2", "input limit",
                                      "CTXLEAK_MAX_LINE_BYTES"]),
        (["--config", "{dup.yaml}"], ["{dup.yaml}:3", "field 'limit'", "twice"]),
    ],
    "influence explain": [
        (["--context", "a b", "--ngram", "0"], ["--ngram", "at least 1"]),
        (["--context", "a b", "--template", "{context} {nope}"], ["--template", "{nope}"]),
        (["--context", "@{folder}"], ["{folder}", "is a folder"]),
        (["--context", "a b", "--limit", "0"], ["--limit"]),
    ],
    "icl": [
        (["--limit", "0"], ["--limit", "at least 1"]),
        (["--batch-size", "abc"], ["--batch-size", "'abc'"]),
        (["--shots", ","], ["--shots"]),
        (["--data", "{folder}"], ["{folder}", "is a folder"]),
        (["--data", "{icl.jsonl}", "--shots", "1", "--queries", "1", "--resume", "--output",
          "{influence-run}"], ["{influence-run}", "'influence' run, not 'icl'"]),
    ],
    "susceptibility": [
        (["--limit", "-1"], ["--limit", "at least 1"]),
        (["--batch-size", "1.5"], ["--batch-size"]),
        (["--data", "{dup_entity.json}"], ["{dup_entity.json}", "entities[2].entity",
                                           "duplicate entity 'france'"]),
        (["--data", "{folder}"], ["{folder}", "is a folder"]),
    ],
    "audit": [
        (["--limit", "0"], ["--limit", "at least 1"]),
        (["--batch-size", "nan"], ["--batch-size"]),
        (["--data", "{folder}"], ["{folder}", "is a folder"]),
    ],
    "probe": [
        (["--subjects", "-1"], ["--subjects", "got -1"]),
        (["--limit", "0"], ["--limit", "at least"]),
        (["--batch-size", "abc"], ["--batch-size", "'abc'"]),
        (["--data", "{records.csv}"], ["{records.csv}", "CSV", "JSONL"]),
        (["--data", "{empty_doc.jsonl}", "--mode", "in-context"],
         ["{empty_doc.jsonl}:1", "field 'documents[0]'", "is empty"]),
        (["--mode", "in-context", "--context-template", "{document} {x} {prompt}"],
         ["--context-template", "{x}"]),
    ],
}


def _fill(text: str, files: dict[str, str]) -> str:
    for name, path in files.items():
        text = text.replace("{" + name + "}", path)
    return text


def one_line_error(command: str, argv: list[str], expected: list[str], files: dict[str, str],
                   tmp_path, capsys) -> str:
    """Run ``ctxleak COMMAND ARGV`` (paths filled in, ``--output`` added if missing) and check
    it exits with status 2 and one stderr line holding every ``expected`` text; return it."""
    argv = [_fill(a, files) for a in argv]
    if "--output" not in argv:
        argv += ["--output", str(tmp_path / "out")]
    code, _, err = run_cli(command.split() + argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    for text in expected:
        assert _fill(text, files) in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command,argv,expected",
                         [(c, a, e) for c, cases in CASES.items() for a, e in cases],
                         ids=[f"{c}:{' '.join(a)}" for c, cases in CASES.items()
                              for a, _ in cases])
def test_bad_input_is_one_line_before_any_model(command, argv, expected, files, tmp_path,
                                                capsys, monkeypatch):
    monkeypatch.setenv("CTXLEAK_MAX_LINE_BYTES", "200")
    line = one_line_error(command, argv, expected, files, tmp_path, capsys)
    assert "at at" not in line
