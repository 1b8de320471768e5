"""The bundled ``demo-qa-large`` set: questions whose short answers only their own document gives,
each asked over its document and three related ones that do not give it; loaded as ``demo-qa``
is. How many answers the default model gets right without the documents and with them is
measured by ``bench/bench_demo_qa_large.py`` (28 minutes for the whole set on a 2-core CPU)."""

from __future__ import annotations

import json
from collections import defaultdict

from ctxleak.methods.catalog import datasets
from ctxleak.methods.influence.data import DEMO_SETS, load_examples, resolve_data
from ctxleak.methods.tradeoff.utility import normalize_answer
from ctxleak.sensitive.detect import find_emails, find_pii


def _rows() -> list[dict]:
    with open(resolve_data("demo-qa-large"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _corpus(rows: list[dict]) -> dict[str, str]:
    return {d["id"]: d["text"] for row in rows for d in row["documents"]}


def test_sizes_ids_and_documents_per_question():
    rows = _rows()
    corpus = _corpus(rows)
    assert len(rows) >= 100 and len(corpus) >= 40
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        ids = [d["id"] for d in row["documents"]]
        assert len(ids) >= 3 and len(set(ids)) == len(ids), row["id"]
        assert row["gold"] in ids and row["task"] == "qa", row["id"]
    # every document answers at least one question, and is one text wherever it appears
    assert {r["gold"] for r in rows} == set(corpus)
    for row in rows:
        assert all(corpus[d["id"]] == d["text"] for d in row["documents"])


def test_each_reference_is_in_its_gold_document_only():
    rows = _rows()
    corpus = {i: normalize_answer(t) for i, t in _corpus(rows).items()}
    for row in rows:
        ref = normalize_answer(row["reference"])
        assert 1 <= len(row["reference"].split()) <= 4, row["id"]
        holders = [i for i, text in corpus.items() if f" {ref} " in f" {text} "]
        assert holders == [row["gold"]], (row["id"], holders)
        assert ref not in normalize_answer(row["query"]), row["id"]  # not given away


def test_distractors_are_the_gold_documents_group():
    """The other documents of a question are its group's: the same four for every question of
    a kind, each group's questions asked of each of its documents."""
    groups: dict[str, set[frozenset[str]]] = defaultdict(set)
    golds: dict[str, set[str]] = defaultdict(set)
    for row in _rows():
        groups[row["kind"]].add(frozenset(d["id"] for d in row["documents"]))
        golds[row["kind"]].add(row["gold"])
    for kind, sets in groups.items():
        assert len(sets) == 1, kind
        assert golds[kind] == set(next(iter(sets))), kind


def test_some_documents_carry_contact_details():
    corpus = _corpus(_rows())
    emails = [i for i, t in corpus.items() if find_emails(t)]
    phones = [i for i, t in corpus.items() if find_pii(t, "GB", valid_only=False, types=("phone",))
              or find_pii(t, "US", valid_only=False, types=("phone",))]
    assert len(emails) >= 4 and len(phones) >= 6, (emails, phones)


def test_loads_through_the_demo_loader_with_its_documents():
    assert DEMO_SETS["demo-qa-large"] == "rag_qa_large.jsonl"
    rows = _rows()
    examples = load_examples("demo-qa-large")
    assert [str(ex.id) for ex in examples] == [r["id"] for r in rows]
    for ex, row in zip(examples, rows):
        assert ex.task == "qa" and ex.query == row["query"]
        assert ex.all_references == (row["reference"],)
        assert ex.documents is not None
        assert [d.id for d in ex.documents] == [d["id"] for d in row["documents"]]
        assert ex.passage_texts == [d["text"] for d in row["documents"]]
    listed = {(d.name, d.command): d.rows for d in datasets()}
    assert listed[("demo-qa-large", "influence")] == f"{len(rows)} questions"
