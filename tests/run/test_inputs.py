"""Every form of input data (SPEC §11) reads into the same rows, with errors that name where."""

from __future__ import annotations

import json

import pytest
from helpers.rundiff import run_dir_differences

from ctxleak.errors import ConfigError, InputError
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.records import iter_rows, read_rows

ROWS = [{"context": "the capital of france is paris", "query": "what ?", "n": 1},
        {"context": "rome is a city", "query": "where ?", "n": 2}]


def _fields(rows):
    return [{k: (int(v) if k == "n" else v) for k, v in r.fields.items()} for r in rows]


def test_every_form_gives_the_same_rows(tmp_path):
    forms = {"list": ROWS}
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    forms["jsonl"] = str(jsonl)
    csv = tmp_path / "d.csv"
    csv.write_text("context,query,n\n" + "".join(f"{r['context']},{r['query']},{r['n']}\n"
                                                for r in ROWS))
    forms["csv"] = csv
    pd = pytest.importorskip("pandas")
    forms["frame"] = pd.DataFrame(ROWS)
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    forms["parquet"] = str(tmp_path / "d.parquet")
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    forms["dataset"] = ds
    ds.save_to_disk(str(tmp_path / "folder"))
    forms["folder"] = str(tmp_path / "folder")
    read = {name: read_rows(data, rename={"query": "question"}) for name, data in forms.items()}
    expected = [{"context": r["context"], "question": r["query"], "n": r["n"]} for r in ROWS]
    for name, rows in read.items():
        assert _fields(rows) == expected, name
        assert [r.line for r in rows] == ([2, 3] if name == "csv" else [1, 2]), name
    assert read["list"][0].file == "<data>" and read["parquet"][0].file.endswith("d.parquet")
    assert describe(forms["frame"]) == "<DataFrame of 2 rows>" and describe(forms["jsonl"]) == \
        str(jsonl)
    assert is_named("demo", "demo") and not is_named(forms["frame"], "demo")


def test_bad_inputs_name_where(tmp_path):
    with pytest.raises(InputError, match=r"^<data>:2, field 'context': missing field"):
        read_rows([{"context": "a"}, {"query": "b"}], required=["context"])
    with pytest.raises(InputError, match=r"^<data>:1: each row must be a dict"):
        read_rows(["not a dict"])
    with pytest.raises(InputError, match="no examples in the data"):
        read_rows([])
    with pytest.raises(ConfigError, match="^data must be a file path"):
        read_rows(42)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match=r"bad.parquet: not a readable Parquet file"):
        read_rows(tmp_path / "bad.parquet")
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match=r"a DatasetDict folder: name one split, e.g. .*train"):
        read_rows(tmp_path / "dd")
    assert len(read_rows(tmp_path / "dd" / "train")) == 2


def test_a_jsonl_file_is_read_row_by_row(tmp_path):
    """``iter_rows`` parses a JSONL file as its rows are taken: the rows before a bad line come
    out before the error, which names the line; ``read_rows`` (all rows) raises at once."""
    path = tmp_path / "log.jsonl"
    path.write_text('{"query": "a"}\n{"query": "b"}\n{"query": \n')
    rows = iter_rows(path)
    assert [next(rows).get("query"), next(rows).get("query")] == ["a", "b"]
    with pytest.raises(InputError) as err:
        next(rows)
    assert err.value.line == 3 and err.value.file == str(path)
    with pytest.raises(InputError, match=r"log.jsonl:3"):
        read_rows(path)
    with pytest.raises(InputError, match="no examples in the file"):
        (tmp_path / "empty.jsonl").write_text("\n")
        list(iter_rows(tmp_path / "empty.jsonl"))


def test_run_dir_differences_sees_numbers_but_not_times(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, (value, seconds) in ((a, (1.5, 3.0)), (b, (1.5, 9.0))):
        d.mkdir()
        (d / "results.json").write_text(json.dumps({"summary": {"x": value},
                                                    "wall_time_s": seconds}))
        (d / "samples.jsonl").write_text(json.dumps({"id": "0", "v": value,
                                                     "seconds": seconds}) + "\n")
        (d / "report.html").write_text(f"<p>{d}</p><p>time per query: {seconds} s</p>"
                                       f"<table><thead><tr><th>v</th><th>seconds</th></tr>"
                                       f"</thead><tr><td>{value}</td><td>{seconds}</td></tr>"
                                       "</table>")
    assert run_dir_differences(a, b) == []
    (b / "samples.jsonl").write_text(json.dumps({"id": "0", "v": 1.6, "seconds": 1}) + "\n")
    (b / "report.html").write_text((b / "report.html").read_text().replace(
        "<td>1.5</td>", "<td>1.6</td>"))
    assert run_dir_differences(a, b) == ["report.html", "samples.jsonl"]
    (b / "samples.jsonl").write_text(json.dumps({"id": "0", "v": 1.5 + 1e-15}) + "\n")
    assert run_dir_differences(a, b) == ["report.html"]  # the last bits of a float sum
    (b / "extra.png").write_bytes(b"x")
    assert f"only in {b}: extra.png" in run_dir_differences(a, b)
