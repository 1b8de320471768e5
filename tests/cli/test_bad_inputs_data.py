"""Bad data files, command by command: CSV dialects, ids, pathological files (a device, a pipe, a
line without end, nesting past the parser's limit), tampered run folders and values outside a
documented range. Each case exits with
status 2 and one line on stderr naming the file, line and field (or the path), before any model
is loaded (``no_model`` from test_bad_inputs fails the test on a model load)."""

from __future__ import annotations

import copy
import json
import os
import unicodedata

import pytest
from helpers.tiny_data import TINY_RELATIONS
from test_bad_inputs import no_model, one_line_error  # noqa: F401 - the fixture is autouse

from ctxleak.results import ICLInfResult

NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
OK = '{"id": "a", "context": "some text", "query": "q?"}\n'


@pytest.fixture
def files(tmp_path):
    """Bad data files, by name -> path (as a string)."""
    out = {}

    def put(name, data: bytes | str):
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        out[name] = str(path)

    bom = b"\xef\xbb\xbf"
    put("dup_col.csv", "id,context,query,context\r\na,x,q,y\r\n")
    put("dup_col_bom.csv", bom + b"context,query,context\r\nx,q,y\r\n")
    put("dup_col_space.csv", "id,context, context,query\na,x,y,q\n")
    put("open_quote.csv", 'id,context,query\na,"some text,q\nb,more,q\n')
    put("short_row.csv", "id,context,query\na,x,q\nb,only\n")
    put("semicolon.csv", "id;context;query\na;x;q\n")
    put("utf16.csv", "id,context,query\na,x,q\n".encode("utf-16"))
    put("bom_empty_id.csv", bom + b"id,context,query\r\n,x,q\r\n")
    put("empty_id.jsonl", OK + '{"id": "", "context": "x", "query": "q"}\n')
    put("blank_id.jsonl", OK + '{"id": "  ", "context": "x", "query": "q"}\n')
    put("list_id.jsonl", '{"id": ["a"], "context": "x", "query": "q"}\n')
    put("nfc_id.jsonl", "".join(json.dumps({"id": i, "context": "x", "query": "q"}) + "\n"
                                for i in (NFC, NFD)))
    put("nfc_id.csv", f"id,context,query\n{NFC},x,q\n{NFD},y,q\n")
    put("nfc_subject.jsonl", "".join(json.dumps({"subject_id": i, "name": "ann",
                                                 "phone": "1 2"}) + "\n" for i in (NFC, NFD)))
    put("empty_subject.jsonl", json.dumps({"subject_id": "", "name": "ann"}) + "\n")
    relations = copy.deepcopy(TINY_RELATIONS)
    entities = relations["relations"][0]["entities"]
    entities[0]["entity"] = NFC
    entities.append({"entity": NFD, "answer": "paris"})
    put("nfc_entity.json", json.dumps(relations))
    put("deep.jsonl", OK + "[" * 200_000 + "]" * 200_000 + "\n")
    put("deep.json", "[" * 200_000 + "]" * 200_000)
    put("no_end.jsonl", OK + "x" * 600_000)
    put("array.jsonl", OK + '["a", "b"]\n')
    put("array.json", '[\n  {"id": "a", "context": "x", "query": "q"}\n]\n')
    put("nan.jsonl", OK + '{"id": "b", "context": "x", "query": "q", "n": NaN}\n')
    put("digits.jsonl", OK + '{"id": ' + "1" * 5000 + ', "context": "x", "query": "q"}\n')
    put("bad_utf8.txt", b"first line\nsecond caf\xe9\n")
    put("deep.yaml", "limit: " + "[" * 50_000 + "]" * 50_000 + "\n")
    for name, mean in (("good-run", 0.5), ("tampered-run", "0.5")):
        summary = {"iclinf": {"1": {"full": {"n": 1, "iclinf_mean": mean, "iclinf_std": 0.0,
                                             "accuracy": 1.0, "mean_loss_by_position": [0.5]}}}}
        out[name] = str(ICLInfResult(records=[{"id": "n=1,q=0"}], summary=summary,
                                     config={"command": "icl"}).save(tmp_path / name))
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    out["fifo.jsonl"] = str(fifo)
    return out


# (argv, substrings the single error line must contain); {name} is a path from ``files``
CASES = {
    "influence": [
        # CSV dialects: a repeated header, with and without an Excel byte-order mark, or
        # repeated but for a space; a quote never closed; a short row; ';' and UTF-16 files
        (["--data", "{dup_col.csv}"], ["{dup_col.csv}:1", "field 'context'", "twice",
                                       "columns 2 and 4"]),
        (["--data", "{dup_col_bom.csv}"], ["{dup_col_bom.csv}:1", "field 'context'", "twice"]),
        (["--data", "{dup_col_space.csv}"], ["{dup_col_space.csv}:1", "field 'context'",
                                             "twice"]),
        (["--data", "{open_quote.csv}"], ["{open_quote.csv}:2", "never closed"]),
        (["--data", "{short_row.csv}"], ["{short_row.csv}:3", "fewer values",
                                         "2 values, 3 columns"]),
        (["--data", "{semicolon.csv}"], ["{semicolon.csv}:1", "separated by ';'"]),
        (["--data", "{utf16.csv}"], ["{utf16.csv}:1", "UTF-16", "UTF-8"]),
        # ids: empty (the BOM no longer hides the id column), blank, not text, NFC-equal
        (["--data", "{bom_empty_id.csv}"], ["{bom_empty_id.csv}:2", "field 'id'", "is empty"]),
        (["--data", "{empty_id.jsonl}"], ["{empty_id.jsonl}:2", "field 'id'", "is empty"]),
        (["--data", "{blank_id.jsonl}"], ["{blank_id.jsonl}:2", "field 'id'", "is empty"]),
        (["--data", "{list_id.jsonl}"], ["{list_id.jsonl}:1", "field 'id'", "got list"]),
        (["--data", "{nfc_id.jsonl}"], ["{nfc_id.jsonl}:2", "field 'id'", "duplicate id",
                                        "first on line 1"]),
        (["--data", "{nfc_id.csv}"], ["{nfc_id.csv}:3", "field 'id'", "duplicate id"]),
        # pathological files
        (["--data", "/dev/zero"], ["/dev/zero", "character device", "not a regular file"]),
        (["--data", "{fifo.jsonl}"], ["{fifo.jsonl}", "pipe", "not a regular file"]),
        # a span log is sniffed only when it is a regular file (a pipe would block the sniff)
        (["--data", "{fifo.jsonl}", "--log-format", "openinference"],
         ["{fifo.jsonl}", "pipe", "not a regular file"]),
        (["--data", "{deep.jsonl}"], ["{deep.jsonl}:2", "nested", "1,000 levels"]),
        (["--data", "{no_end.jsonl}"], ["{no_end.jsonl}:2", "input limit of 500,000 bytes"]),
        (["--data", "{array.jsonl}"], ["{array.jsonl}:2", "JSON object, got an array"]),
        (["--data", "{array.json}"], ["{array.json}:1", "JSON array over several lines",
                                      "one JSON object per line"]),
        (["--data", "{nan.jsonl}"], ["{nan.jsonl}:2", "NaN is not a JSON value"]),
        (["--data", "{digits.jsonl}"], ["{digits.jsonl}:2", "not readable JSON", "digits"]),
        (["--config", "{deep.yaml}"], ["{deep.yaml}", "nested"]),
    ],
    "probe": [
        # documented ranges: --shots 1..5, learning rates finite
        (["--shots", "9"], ["--shots must be integers from 1 to 5", "'9'"]),
        (["--shots", "1,6"], ["--shots must be integers from 1 to 5", "'1,6'"]),
        (["--soft-lr", "inf"], ["--soft-lr must be a finite number > 0", "inf"]),
        (["--canary", "4", "--canary-lr", "inf"], ["--canary-lr must be a finite number > 0"]),
        (["--data", "{nfc_subject.jsonl}"], ["{nfc_subject.jsonl}:2", "field 'subject_id'",
                                             "duplicate id"]),
        (["--data", "{empty_subject.jsonl}"], ["{empty_subject.jsonl}:1",
                                               "field 'subject_id'", "is empty"]),
        (["--data", "/dev/zero"], ["/dev/zero", "character device"]),
    ],
    "susceptibility": [
        (["--data", "{nfc_entity.json}"], ["{nfc_entity.json}", "entities[2].entity",
                                           "duplicate entity"]),
        (["--data", "{deep.json}"], ["{deep.json}", "nested"]),
        (["--data", "{fifo.jsonl}"], ["{fifo.jsonl}", "pipe"]),
    ],
    "icl": [
        (["--data", "{array.jsonl}"], ["{array.jsonl}:2", "JSON object, got an array"]),
    ],
    "audit": [
        (["--data", "/dev/zero"], ["/dev/zero", "character device"]),
        (["--max-new-tokens", "0"], ["--max-new-tokens must be >= 1, got 0"]),
    ],
    "influence explain": [
        (["--context", "a b", "--task", "bogus"], ["unknown --task 'bogus'",
                                                   "qa, summarization, custom"]),
    ],
    "pii extract": [
        (["--input", "{bad_utf8.txt}"], ["{bad_utf8.txt}:2", "not UTF-8"]),
    ],
    "compare": [  # a run folder edited by hand: a number became a string
        (["{tampered-run}", "{good-run}"], ["{tampered-run}/results.json",
                                            "field 'summary.iclinf.1.full.iclinf_mean'",
                                            "must be a number, got '0.5'"]),
    ],
}


@pytest.mark.parametrize("command,argv,expected",
                         [(c, a, e) for c, cases in CASES.items() for a, e in cases],
                         ids=[f"{c}:{' '.join(a)}" for c, cases in CASES.items()
                              for a, _ in cases])
def test_bad_data_is_one_line_before_any_model(command, argv, expected, files, tmp_path,
                                               capsys, monkeypatch):
    monkeypatch.setenv("CTXLEAK_MAX_LINE_BYTES", "500000")
    one_line_error(command, argv, expected, files, tmp_path, capsys)


def test_probe_shots_range_in_the_library():
    """The range is the library's: Python callers get it too, naming the keyword."""
    from ctxleak.errors import ConfigError
    from ctxleak.methods.pii.params import ProbeParams

    with pytest.raises(ConfigError, match=r"^shots must be integers from 1 to 5") as info:
        ProbeParams(shots=[1, 9])
    assert info.value.param == "shots"
