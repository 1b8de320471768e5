"""run_method, the one loop under every method: items checked before the model, batches given
to measure as lists, records appended in item order, resume after a failure, results.json and the
report (SPEC §11)."""

from __future__ import annotations

import json

import pytest

from ctxleak.api import run_method
from ctxleak.errors import ConfigError
from ctxleak.report import Report
from ctxleak.report.view import View
from ctxleak.report.views import VIEWS
from ctxleak.run.method import ItemIds, Method, Plan
from ctxleak.run.options import RunOptions


class WordCount(Method):
    """A toy method: the number of words of each text, measured two at a time."""

    name = "wordcount"
    desc = "words"

    def __init__(self, common=None, *, fail_on=None):
        super().__init__(common)
        self.fail_on, self.calls = fail_on, []

    def plan(self, data):
        if not data:
            raise ConfigError("data is empty", param="data")
        return Plan(items=[{"key": f"t{i}", "text": t} for i, t in enumerate(data)],
                    config={"fail_on": None}, state=None)

    def ids(self, item):
        return ItemIds(item["key"], item["key"])

    def batches(self, ready, todo, policy):
        for i in range(0, len(todo), 2):
            yield list(todo[i:i + 2])

    def measure(self, lm, ready, items):
        self.calls.append([it["key"] for it in items])
        if any(it["text"] == self.fail_on for it in items):
            raise RuntimeError("boom")
        return [{"words": len(it["text"].split())} for it in items]

    def summarize(self, ready, records):
        return {"total": sum(r["words"] for r in records)}


class WordCountView(View):
    """Its report view: the files and the page, from the Result alone."""

    def files(self, result):
        return {"counts.txt": " ".join(str(r["words"]) for r in result.records)}

    def page(self, result):
        report = Report("word count")
        report.add_kv(result.summary)
        return report


VIEWS.setdefault("wordcount", WordCountView())


TEXTS = ["one", "one two", "one two three", "a b c d", "e"]


def test_run_method_batches_records_and_writes_the_folder(llama_lm, tmp_path):
    method = WordCount(RunOptions(output=str(tmp_path / "run")))
    result = run_method(method, llama_lm, TEXTS, progress=False)
    # lists, in item order: under auto the first alone (the progress bar's early estimate),
    # then the method's batches of two
    assert method.calls == [["t0"], ["t1", "t2"], ["t3", "t4"]]
    assert [r["id"] for r in result.records] == ["t0", "t1", "t2", "t3", "t4"]
    assert [r["words"] for r in result.records] == [1, 2, 3, 4, 1]
    assert result.summary == {"total": 11}
    body = json.loads((tmp_path / "run" / "results.json").read_text())
    assert body["summary"] == {"total": 11} and body["n_effective"] == 5
    assert body["config"]["command"] == "wordcount" and body["config"]["model"] == "tiny-llama"
    assert (tmp_path / "run" / "counts.txt").read_text() == "1 2 3 4 1"
    assert "word count" in result.to_html() and (tmp_path / "run" / "report.html").is_file()


def test_bad_items_are_refused_before_the_model_loads(tmp_path, monkeypatch):
    import ctxleak.run.runner as runner

    monkeypatch.setattr(runner, "load_lm", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ConfigError, match="data is empty"):
        run_method(WordCount(RunOptions(output=str(tmp_path / "run"))), None, [])
    assert not (tmp_path / "run").exists()


def test_a_failed_run_resumes_where_it_stopped(llama_lm, tmp_path):
    out = str(tmp_path / "run")
    with pytest.raises(RuntimeError, match="boom"):
        run_method(WordCount(RunOptions(output=out), fail_on="a b c d"), llama_lm, TEXTS,
                   progress=False)
    kept = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    # the batches before the failing one ([t3, t4]) were flushed: t0 alone, then [t1, t2]
    assert [json.loads(x)["id"] for x in kept] == ["t0", "t1", "t2"]
    again = WordCount(RunOptions(output=out))
    result = run_method(again, llama_lm, TEXTS, resume=True, progress=False)
    assert again.calls == [["t3"], ["t4"]]  # only what was left, the first of it alone
    assert [r["words"] for r in result.records] == [1, 2, 3, 4, 1]


def test_measure_must_return_one_record_per_item(llama_lm, tmp_path):
    class Short(WordCount):
        def measure(self, lm, ready, items):
            return super().measure(lm, ready, items)[:1]

    with pytest.raises(RuntimeError, match="returned 1 records for 2 items"):
        run_method(Short(RunOptions(output=str(tmp_path / "run"))), llama_lm, TEXTS,
                   progress=False)


def test_the_run_layer_returns_plain_data_and_the_face_finishes(llama_lm, tmp_path):
    """run.runner.run_method stops at records, summary and provenance (no Result, no report:
    nothing above the run layer is reached); results.finish_run makes the Result and writes
    results.json and report.html."""
    from ctxleak.results import Result, finish_run
    from ctxleak.run.output import RunOutput
    from ctxleak.run.runner import run_method as measure_run

    out = measure_run(WordCount(RunOptions(output=str(tmp_path / "run"))), llama_lm, TEXTS,
                      progress=False)
    assert isinstance(out, RunOutput) and not isinstance(out, Result)
    assert [r["words"] for r in out.records] == [1, 2, 3, 4, 1]
    assert out.config["command"] == "wordcount" and out.path == tmp_path / "run"
    assert not (out.path / "results.json").exists() and not (out.path / "report.html").exists()
    result = finish_run(out)
    assert result.records == out.records and result.summary == out.summary
    assert (out.path / "results.json").is_file() and (out.path / "report.html").is_file()
    assert (out.path / "counts.txt").read_text() == "1 2 3 4 1"
