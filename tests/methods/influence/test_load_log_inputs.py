"""Reading the influence method's data (``load_log``), no model: each row that cannot be an
example is an error naming the file, line and field; a task, template or passage split that
cannot be read is refused before the data; the paper's Hub datasets are read into examples
field by field (the ``datasets`` library's loader replaced by rows the test writes: no network)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.data import load_examples, load_hub_dataset


def _jsonl(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


GOOD = {"id": "a", "context": "paris is the capital of france .", "query": "what is the capital ?"}


@pytest.mark.parametrize("row, field, says", [
    ({**GOOD, "task": "translation"}, "task", "unknown task 'translation'"),
    ({**GOOD, "response": ["paris"]}, "response", "must be a string"),
    ({**GOOD, "documents": "paris is the capital"}, "documents",
     "query 'what is the capital ?': must be a list of retrieved documents, got str"),
    ({**GOOD, "documents": []}, "documents", "no documents: the retriever returned nothing"),
])
def test_a_row_that_cannot_be_an_example_names_its_line_and_field(tmp_path, row, field, says):
    path = _jsonl(tmp_path, [GOOD | {"id": "first"}, row])
    with pytest.raises(InputError, match=re.escape(says)) as error:
        load_examples(path)
    assert (error.value.file, error.value.line, error.value.field) == (path, 2, field)


def test_documents_without_a_query_are_named_without_one(tmp_path):
    path = _jsonl(tmp_path, [{"context": "x", "task": "summarization", "documents": {"a": 1}}])
    with pytest.raises(InputError) as error:
        load_examples(path)
    assert str(error.value) == f"{path}:1, field 'documents': must be a list of retrieved " \
                               "documents, got dict"


@pytest.mark.parametrize("options, param, says", [
    ({"passages": "word"}, "passages", "passages must be sentence or paragraph, not 'word'"),
    ({"task": "chat"}, "task", "unknown task 'chat': use auto, qa, summarization or custom"),
    ({"task": "custom"}, "task", "task='custom' needs template="),
    ({"template": "Q: {query}"}, "template", r"template must contain the slot \{context\}"),
    ({"log_format": "csv"}, "log_format", "log_format must be auto, rows, openinference"),
])
def test_options_that_cannot_be_read_are_refused_naming_the_keyword(tmp_path, options, param,
                                                                   says):
    with pytest.raises(ConfigError, match=says) as error:
        load_examples(_jsonl(tmp_path, [GOOD]), **options)
    assert error.value.param == param


def test_a_template_with_its_context_slot_is_used(tmp_path):
    [ex] = load_examples(_jsonl(tmp_path, [GOOD]), task="custom",
                         template="Notes: {context}\nQ: {query}")
    assert ex.task == "custom" and ex.context == GOOD["context"] and ex.query == GOOD["query"]


class FakeDatasets:
    """The ``datasets`` module as ``load_hub_dataset`` uses it: ``load_dataset`` answers the
    rows given (and records what was asked), or raises."""

    def __init__(self, rows):
        self.rows, self.asked = rows, []

    def load_dataset(self, *args, **kwargs):
        self.asked.append((args, kwargs))
        if isinstance(self.rows, Exception):
            raise self.rows
        return iter(self.rows)


def test_cnn_dailymail_rows_are_summarisation_examples(monkeypatch):
    fake = FakeDatasets([{"id": "c1", "article": "the article .", "highlights": "the summary"},
                         {"article": "second .", "highlights": "two"},
                         {"id": "c3", "article": "third .", "highlights": "three"}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    got = load_hub_dataset("cnn_dailymail", split="validation", limit=2)
    assert [(e.id, e.context, e.query, e.reference, e.task) for e in got] == [
        ("c1", "the article .", "", "the summary", "summarization"),
        ("1", "second .", "", "two", "summarization")]
    assert fake.asked == [(("cnn_dailymail", "3.0.0"), {"split": "validation"})]


def test_pubmedqa_rows_are_qa_examples_through_load_examples(monkeypatch):
    fake = FakeDatasets([{"pubid": 7, "context": {"contexts": ["first part .", "second ."]},
                          "question": "does it work ?", "long_answer": "yes it does"}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    [ex] = load_examples("pubmedqa")
    assert (ex.id, ex.context, ex.query, ex.reference, ex.task) == \
        ("7", "first part . second .", "does it work ?", "yes it does", "qa")
    assert fake.asked == [(("pubmed_qa", "pqa_labeled"), {"split": "train"})]


def test_a_hub_dataset_that_cannot_be_loaded_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets",
                        FakeDatasets(ConnectionError("offline and not cached")))
    with pytest.raises(ConfigError, match="could not load dataset 'cnn_dailymail': offline"):
        load_hub_dataset("cnn_dailymail")
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed: the import fails
    with pytest.raises(ConfigError, match=r"needs the 'datasets' package \(pip install "
                                          "datasets\\)") as error:
        load_hub_dataset("pubmedqa")
    assert error.value.param == "data"
