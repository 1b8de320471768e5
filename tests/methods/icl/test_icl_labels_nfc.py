"""ICL labels compared as ids are: in Unicode NFC without surrounding spaces, so a label typed
precomposed and with a combining accent (which print alike) is one class, in the data and in
``labels=``."""

from __future__ import annotations

import json
import unicodedata

from ctxleak.methods.icl import load_task, parse_labels

NFC = unicodedata.normalize("NFC", "Café")
NFD = unicodedata.normalize("NFD", "Café")


def _write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def test_two_spellings_of_a_label_in_the_data_are_one_class(tmp_path):
    assert NFC != NFD
    train = _write(tmp_path / "train.jsonl", [
        {"text": "an espresso", "label": NFC}, {"text": "a latte", "label": NFD},
        {"text": "a bun", "label": "Bakery"}, {"text": "a loaf", "label": "Bakery"}])
    test = _write(tmp_path / "test.jsonl", [{"text": "a mocha", "label": NFD}])
    task = load_task(train, test)
    assert task.labels == (NFC, "Bakery")
    assert {e.label_index for e in task.train[:2]} == {0} and task.test[0].label == NFC


def test_labels_given_in_another_spelling_match_the_data(tmp_path):
    train = _write(tmp_path / "train.jsonl", [
        {"text": "an espresso", "label": NFC}, {"text": "a bun", "label": "Bakery"}])
    test = _write(tmp_path / "test.jsonl", [{"text": "a mocha", "label": NFC}])
    task = load_task(train, test, labels=f"{NFD},Bakery")  # names, typed decomposed
    assert task.labels == (NFC, "Bakery") and task.test[0].label_index == 0
    assert parse_labels(f"{NFD}={NFD}, Bakery=Bakery") == ([NFC, "Bakery"],
                                                          {NFC: NFC, "Bakery": "Bakery"})
