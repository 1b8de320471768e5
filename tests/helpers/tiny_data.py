"""Data written with the tiny models' word vocabulary (tests/helpers/tiny_models.py), so that texts
tokenise to real ids rather than <unk>: ICL tasks, relations for susceptibility and PII records.
Shared by the method tests and the data-parallel tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ctxleak.methods.pii.records import PIIRecord, save_records

# ICL: (text, label) pairs and the templates that fit them
TRAIN = [("the capital of france is paris", "yes"), ("rome is in italy", "no"),
         ("berlin is a city", "one"), ("the doctor said yes", "yes"),
         ("a patient of the doctor", "no"), ("madrid is the capital of spain", "one"),
         ("the news report was one page", "yes"), ("two and three is four", "no")]
TEST = [("the capital of italy is rome", "yes"), ("the doctor and the patient", "no"),
        ("one two three", "one"), ("paris is a city", "yes")]
TEMPLATES = ["--format", "custom", "--instruction", "answer : {labels} .\\n",
             "--exemplar-template", "question : {text} answer : {label}\\n",
             "--query-template", "question : {text} answer :"]

# susceptibility: two relations in the bundled JSON format
TINY_RELATIONS = {"relations": [
    {"name": "capital", "closed_query": "question : is {answer} the capital of {entity} ? answer :",
     "open_qa_query": "question : what is the capital of {entity} ? answer :",
     "open_completion_query": "the capital of {entity} is",
     "context_template": "the capital of {entity} is {answer} .\n",
     "entities": [{"entity": "france", "answer": "paris"}, {"entity": "italy", "answer": "rome"}],
     "fake_entities": ["madrid"], "answers": ["paris", "rome", "berlin", "madrid"]},
    {"name": "country", "closed_query": "question : is {entity} a city in {answer} ? answer :",
     "open_qa_query": "question : what country is {entity} in ? answer :",
     "open_completion_query": "the city {entity} is in the country",
     "context_template": "the city {entity} is in the country {answer} .\n",
     "entities": [{"entity": "paris", "answer": "france"}, {"entity": "berlin",
                                                            "answer": "germany"}],
     "fake_entities": ["rome"], "answers": ["france", "germany", "italy", "spain"]},
]}


# PII records
PLACES = ["paris", "france", "rome", "italy", "berlin", "germany", "madrid", "spain"]
PHONES = ["one two", "two three", "three four", "four one", "one three", "two four",
          "three one", "four two"]


def word_records(n: int = 6) -> list[PIIRecord]:
    """``n`` (<= 8) subjects with distinct names, phones, e-mails, addresses, fathers and
    universities, each with one document stating the phone the way the twins-2 template asks
    for it ("the phone of NAME is PHONE")."""
    out = []
    for i in range(n):
        a, b = PLACES[i % 8], PLACES[(i + 3) % 8]
        out.append(PIIRecord(
            subject_id=f"s{i}", name=f"{a} {b}", email=f"{b} news {PLACES[(i + 4) % 8]}",
            phone=PHONES[i], address=f"{PLACES[(i + 5) % 8]} city {PLACES[(i + 6) % 8]}",
            relations={"father": f"{PLACES[(i + 1) % 8]} {b}"},
            university=f"{PLACES[(i + 2) % 8]} report {PLACES[(i + 7) % 8]}",
            documents=[f"the phone of {a} {b} is {PHONES[i]} . the email of {a} {b} is "
                       f"{b} news {PLACES[(i + 4) % 8]} ."]))
    return out


# one relation in ctxleak's relation format, for the susceptibility data and CLI tests
CAPITAL_RELATION = {
    "name": "capital",
    "closed_query": "Q: Is {answer} the capital of {entity}? A:",
    "open_qa_query": "Q: What is the capital of {entity}? A:",
    "open_completion_query": "The capital of {entity} is",
    "context_template": "The capital of {entity} is {answer}.\n",
    "entities": [{"entity": "France", "answer": "Paris"}, {"entity": "Japan", "answer": "Tokyo"}],
    "fake_entities": ["Velmoria"],
    "answers": ["Paris", "Tokyo", "Cairo"],
}


def write_json(tmp_path, obj, name="rel.json"):
    """Write ``obj`` (JSON-encoded unless already a string) to ``tmp_path/name``."""
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return path


def write_command_data(root: Path, n_records: int = 6, *, contexts: Sequence[str] = (),
                       payload: str = "") -> Path:
    """The data files of every model command's tiny run, written into ``root``: ``rel.json``
    (susceptibility), ``records.jsonl`` (probe, ``n_records`` word records), ``train.jsonl`` and
    ``test.jsonl`` (ICL) and, given ``contexts``, ``docs.jsonl`` (influence: one document per
    context, ids ``d0``, ``d1``, ..., the capital query). ``payload`` is appended to the
    documents' ids, the query and the ICL texts (the reports' escaping tests). Returns
    ``root``."""
    tail = f" {payload}" if payload else ""
    (root / "rel.json").write_text(json.dumps(TINY_RELATIONS))
    save_records(word_records(n_records), root / "records.jsonl")
    for name, pairs in (("train", TRAIN), ("test", TEST)):
        (root / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": t + tail, "label": lab}) + "\n" for t, lab in pairs))
    if contexts:
        (root / "docs.jsonl").write_text("".join(
            json.dumps({"id": f"{payload} d{i}" if payload else f"d{i}", "context": c,
                        "query": "what is the capital ?" + tail}) + "\n"
            for i, c in enumerate(contexts)))
    return root


def icl_keywords() -> dict[str, str]:
    """:data:`TEMPLATES` as the API's keywords (``format``, ``instruction``, ...)."""
    flags = dict(zip(TEMPLATES[::2], TEMPLATES[1::2]))
    return {"format": flags["--format"], "instruction": flags["--instruction"],
            "exemplar_template": flags["--exemplar-template"],
            "query_template": flags["--query-template"]}
