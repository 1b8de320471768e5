"""A run's records are read back from samples.jsonl on demand (StoredRows), not kept in memory:
the Result's records equal the stored rows, in order, index and slice like a list, keep a row
changed in place, survive the file being rewritten, and the method's summary over them equals
the one over a plain list; a run of 300 heavy rows keeps a name and a byte span per row, not the
rows."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.influence.method import InfluenceMethod, Ready
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.run.method import ItemIds, Method, Plan
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import run_method
from ctxleak.run.stored import StoredRows

DOCS = ["the capital of france is paris .", "rome is the capital of italy .",
        "berlin is in germany .", "the doctor said the news report .",
        "madrid is in spain ."]
LOG = [{"id": f"turn-{t}", "query": "what is the capital ?",
        "documents": [{"id": f"d{(t + k) % 5}", "text": DOCS[(t + k) % 5]} for k in range(3)],
        "response": f"{DOCS[t % 5]} yes"} for t in range(8)]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def log_run(llama_lm, tmp_path_factory):
    out = tmp_path_factory.mktemp("stored") / "run"
    return ctxleak.influence(llama_lm, LOG, temperature=1.0, progress=False, output=str(out)), out


def test_a_runs_records_are_its_stored_rows_read_on_demand(log_run):
    res, out = log_run
    stored = _lines(out / "samples.jsonl")
    assert isinstance(res.records, StoredRows) and len(res.records) == len(stored) == 8
    assert list(res.records) == stored and list(res.records) == stored  # re-iterable, in order
    assert res.records == stored and res.records[-1] == stored[-1]
    assert res.records[3:7] == stored[3:7] and isinstance(res.records[3:7], StoredRows)
    assert res.records[::-2] == stored[::-2]
    with pytest.raises(IndexError):
        res.records[8]
    loaded = ctxleak.load_result(out)
    assert isinstance(loaded.records, StoredRows) and loaded.records == stored
    assert len(res.to_pandas()) == 8
    # a row changed in place stays changed, as in a list of dicts (the file is not touched)
    for record in loaded.records:
        record["note"] = record["id"].upper()
    assert [r["note"] for r in loaded.records] == [r["id"].upper() for r in stored]
    assert loaded.records[2:4][1]["note"] == "TURN-3" and _lines(out / "samples.jsonl") == stored


def test_what_a_list_of_dicts_did_works_or_says_the_one_call(log_run):
    """``json.dumps`` of the rows, ``+`` and ``copy`` work through one call or directly; what
    only a list does (``append``, ``sort``...) is an error saying that call."""
    res, out = log_run
    stored = _lines(out / "samples.jsonl")
    rows = res.records.to_list()
    assert type(rows) is list and rows == stored
    assert json.loads(json.dumps(res.records.to_list())) == stored
    assert json.loads(json.dumps(list(res.records))) == stored
    assert res.records + [{"x": 1}] == [*stored, {"x": 1}]
    assert [{"x": 1}] + res.records == [{"x": 1}, *stored]
    assert res.records.copy() == stored and type(res.records.copy()) is list
    for name in ("append", "extend", "sort", "pop"):
        with pytest.raises(AttributeError, match=r"list\(result.records\)"):
            getattr(res.records, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        res.records.nothing  # noqa: B018


def test_the_summary_over_stored_rows_is_the_one_over_a_list(log_run, llama_lm):
    """The influence summary (bootstrap intervals, control, ledger per document) computed from
    the rows read on demand equals the one computed from the same rows held in a list."""
    res, _ = log_run
    method = InfluenceMethod(RunOptions(), InfluenceParams(temperature=1.0))
    ready = Ready(method.plan(LOG).state, llama_lm)
    lazy, plain = method.summarize(ready, res.records), method.summarize(ready, list(res.records))
    assert lazy == plain
    assert lazy["settings"][0]["documents"] and lazy["settings"][0]["control"]["enabled"]


def test_rows_are_found_by_name_when_the_file_is_rewritten(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows = [{"id": f"r{i}", "x": [i] * i} for i in range(5)]
    data = [(json.dumps(r) + "\n").encode() for r in rows]
    path.write_bytes(b"".join(data))
    offsets = [sum(len(d) for d in data[:i]) for i in range(5)]
    stored = StoredRows([path], [r["id"] for r in rows], [0] * 5, offsets, [len(d) for d in data])
    assert stored == rows
    path.write_text("".join(json.dumps(r, indent=None, separators=(",", ":")) + "\n"
                            for r in reversed(rows)))  # other offsets, other order
    assert stored == rows and stored[2] == rows[2]
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(InputError, match="no row named 'r1'"):
        list(stored)


class Heavy(Method):
    """A toy method whose records are heavy (a text of 20,000 characters), 100 at a time."""

    name = "heavy"
    desc = "heavy"

    def plan(self, data):
        return Plan(items=list(range(data)), config={}, state=None)

    def ids(self, item):
        return ItemIds(f"r{item}", f"r{item}")

    def batches(self, ready, todo, policy):
        for i in range(0, len(todo), 100):
            yield list(todo[i:i + 100])

    def measure(self, lm, ready, items):
        return [{"i": i, "text": f"{i:05d}" * 4000} for i in items]

    def summarize(self, ready, records):
        return {"total": sum(r["i"] for r in records),
                "texts": sum(r["text"] == f"{r['i']:05d}" * 4000 for r in records)}


def test_a_run_keeps_a_span_per_row_not_the_rows(llama_lm, tmp_path):
    """300 records of 20 kB each (6 MB in all, which a run that kept its rows held to the end):
    what the finished run holds grows by less than 1,000 bytes a row (its name, byte span and
    item: about 350), and its records read back equal."""
    n = 300
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = run_method(Heavy(RunOptions(output=str(tmp_path / "run"))), llama_lm, n,
                         progress=False)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert out is not None and len(out.records) == n
    assert kept < 1000 * n, f"the run keeps {kept / n:.0f} bytes a row"
    assert out.records[167] == {"id": "r167", "i": 167, "text": "00167" * 4000}
    assert out.summary == {"total": sum(range(n)), "texts": n}
