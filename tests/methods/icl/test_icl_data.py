"""ICL data loading and its errors (SPEC §9: file, line and field, before any model)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.icl import FORMATS, get_format, load_task, parse_labels
from ctxleak.methods.icl.prompts import join_labels


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def rows(labels, n=2):
    return [{"text": f"text {i} about {lab}", "label": lab} for lab in labels for i in range(n)]


def test_demo_task_has_four_labels_and_the_agnews_format():
    task = load_task("demo")
    assert task.labels == ("World", "Sports", "Business", "Technology")
    assert len(task.train) == 120 and len(task.test) == 40
    assert task.fmt.name == "agnews"
    assert task.fmt.instruction.startswith("Classify the news articles into the categories of "
                                           "World, Sports, Business, and Technology.")
    assert {e.label for e in task.test} == set(task.labels)
    assert all(task.labels[e.label_index] == e.label for e in task.train)


def test_table_2_formats():
    assert FORMATS["trec"].exemplar == "Question: {text}\nAnswer Type: {label}\n\n"
    assert FORMATS["trec"].query == "Question: {text}\nAnswer Type:"
    assert FORMATS["dbpedia"].labels[-1] == "Book" and len(FORMATS["dbpedia"].labels) == 14
    assert FORMATS["agnews"].query == "Article: {text}\nAnswer:"
    assert join_labels(["a", "b", "c"]) == "a, b, and c" and join_labels(["a", "b"]) == "a and b"


def test_files_with_test_file_and_label_order(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["pos", "neg"]))
    test = write_jsonl(tmp_path / "test.jsonl", rows(["neg", "pos"], 1))
    task = load_task(train, test)
    assert task.labels == ("pos", "neg") and task.fmt.name == "custom"
    assert "pos and neg" in task.fmt.instruction_text(task.labels)
    task = load_task(train, test, labels="neg,pos")
    assert task.labels == ("neg", "pos") and task.train[0].label_index == 1


def test_csv_and_split_field_and_renamed_fields(tmp_path):
    path = tmp_path / "all.csv"
    path.write_text("sentence,category,part\nfine day,good,train\nawful day,bad,train\n"
                    "nice,good,test\n", encoding="utf-8")
    task = load_task(str(path), split_field="part", text_field="sentence",
                     label_field="category")
    assert [e.text for e in task.train] == ["fine day", "awful day"]
    assert [(e.text, e.label, e.line) for e in task.test] == [("nice", "good", 4)]


def test_integer_labels_map_to_names(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": 0}, {"text": "b",
                                                                              "label": 1}])
    test = write_jsonl(tmp_path / "test.jsonl", [{"text": "c", "label": 1}])
    task = load_task(train, test, labels="Yes,No")
    assert [e.label for e in task.train] == ["Yes", "No"] and task.test[0].label == "No"
    task = load_task(train, test, labels="1=Up,0=Down")
    assert task.labels == ("Up", "Down") and task.train[0].label == "Down"


def test_parse_labels_errors():
    assert parse_labels("a, b") == (["a", "b"], {})
    with pytest.raises(ConfigError, match="not both"):
        parse_labels("a,1=b")
    with pytest.raises(ConfigError, match="twice"):
        parse_labels("a,a")


def test_more_shots_than_training_examples(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["x", "y"], 1))
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 1))
    task = load_task(train, test)
    task.check_shots([1, 2])
    with pytest.raises(InputError) as err:
        task.check_shots([2, 3])
    assert "shots=3" in str(err.value) and "train.jsonl" in str(err.value)
    assert "only 2" in str(err.value)


def test_unknown_label_in_test_data_names_file_line_field(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["x", "y"]))
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 2) + [{"text": "t", "label": "z"}])
    with pytest.raises(InputError) as err:
        load_task(train, test)
    assert err.value.file.endswith("test.jsonl") and err.value.line == 3
    assert err.value.field == "label" and "'z'" in str(err.value)
    assert "test.jsonl:3" in str(err.value)


def test_unknown_label_against_the_labels_flag(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["x", "y"]))
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 1))
    with pytest.raises(InputError) as err:
        load_task(train, test, labels="x,w")
    assert err.value.line == 3 and err.value.field == "label"


@pytest.mark.parametrize("bad, field, message", [
    ({"text": "   ", "label": "x"}, "text", "is empty"),
    ({"label": "x"}, "text", "missing"),
    ({"text": "t"}, "label", "missing"),
    ({"text": "t", "label": ""}, "label", "is empty"),
    ({"text": "t", "label": 1.5}, "label", "string or an integer"),
])
def test_bad_fields_name_file_line_field(tmp_path, bad, field, message):
    good = rows(["x", "y"])
    train = write_jsonl(tmp_path / "train.jsonl", good[:2] + [bad] + good[2:])
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 1))
    with pytest.raises(InputError) as err:
        load_task(train, test)
    assert (err.value.line, err.value.field) == (3, field)
    assert message in str(err.value) and "train.jsonl:3" in str(err.value)


def test_malformed_jsonl_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": \n', encoding="utf-8")
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 1))
    with pytest.raises(InputError) as err:
        load_task(str(path), test)
    assert err.value.line == 2 and "not valid JSON" in str(err.value)
    assert "train.jsonl:2" in str(err.value)


def test_split_field_errors(tmp_path):
    path = write_jsonl(tmp_path / "all.jsonl", [{"text": "a", "label": "x", "split": "train"},
                                                {"text": "b", "label": "y", "split": "dev"}])
    with pytest.raises(InputError) as err:
        load_task(path)
    assert (err.value.line, err.value.field) == (2, "split")
    path = write_jsonl(tmp_path / "only.jsonl", [{"text": "a", "label": "x", "split": "train"}])
    with pytest.raises(InputError, match="no lines with split = 'test'"):
        load_task(path)
    path = write_jsonl(tmp_path / "none.jsonl", [{"text": "a", "label": "x"}])
    with pytest.raises(InputError, match="test_data=FILE"):
        load_task(path)


def test_builtin_format_with_other_labels_is_refused(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["x", "y"]))
    test = write_jsonl(tmp_path / "test.jsonl", rows(["x"], 1))
    with pytest.raises(ConfigError, match="format=custom"):
        load_task(train, test, fmt="agnews")


def test_template_checks():
    with pytest.raises(ConfigError, match="must contain '{label}'"):
        get_format("custom", exemplar="Q: {text}\n")
    with pytest.raises(ConfigError, match="unknown slot"):
        get_format("custom", query="Q: {text} {label}")
    with pytest.raises(ConfigError, match="unknown format"):
        get_format("imdb")
    fmt = get_format("custom", exemplar="Q: {text}\\nA: {label}\\n\\n")
    assert fmt.exemplar == "Q: {text}\nA: {label}\n\n"


def test_single_label_is_refused(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(["x"]))
    with pytest.raises(ConfigError, match="two labels"):
        load_task(train, train)


def test_hf_datasets_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
    with pytest.raises(ConfigError, match="pip install datasets"):
        load_task("hf:agnews")
    with pytest.raises(ConfigError, match="hf:agnews, hf:dbpedia or hf:trec"):
        load_task("hf:imdb")


def test_hf_datasets_through_a_stub(monkeypatch):
    class Split(list):
        features = {"coarse_label": types.SimpleNamespace(
            names=["ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"])}

    def load_dataset(name, split):
        assert name == "CogComp/trec"
        return Split([{"text": f"q{i}?", "coarse_label": i % 6} for i in range(12)])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    task = load_task("hf:trec")
    assert task.fmt.name == "trec"
    assert task.labels == ("Abbreviation", "Entity", "Description", "Person", "Location",
                           "Number")
    assert [e.label for e in task.train[:4]] == ["Abbreviation", "Entity", "Description",
                                                 "Person"]
    assert task.train[3].file == "hf:CogComp/trec[train]" and task.train[3].line == 4
