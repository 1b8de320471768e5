"""The bundled ``demo-qa-large`` set: questions whose short answers only their own document gives,
each asked over its document and three related ones that do not give it; loaded as ``demo-qa``
is. On the default model (integration tier): how many answers are right without the documents
and with them."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from ctxleak.methods.catalog import datasets
from ctxleak.methods.influence.data import DEMO_SETS, load_examples, prompt_parts, resolve_data
from ctxleak.methods.tradeoff.utility import exact_match, normalize_answer, token_f1
from ctxleak.mitigations.cid import CIDConfig, generate_cid_many
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


def _right(answer: str, reference: str) -> bool:
    """The reference, SQuAD-normalised, appears in the normalised answer as whole words."""
    return f" {normalize_answer(reference)} " in f" {normalize_answer(answer)} "


@pytest.mark.integration
def test_answers_need_their_documents(default_lm, capsys):
    """Greedy answers of up to 32 tokens from the prompt with the four documents (λ = 1) and
    from the same prompt without them (λ = 0), under the bundled QA template: near none right
    without them (measured once on a 2-core CPU, 28 minutes: 0 of 148 without, mean token F1
    0.009; 9 of 148 with, F1 0.017: the 135M default model mostly repeats the first document
    under this template, so the set separates mechanisms better on a larger model)."""
    examples = load_examples("demo-qa-large")
    config = {lam: CIDConfig(lam=lam, max_new_tokens=32, min_new_tokens=0) for lam in (0.0, 1.0)}
    parts = [prompt_parts(default_lm, ex, reserve=32)[0] for ex in examples]
    refs = [ex.reference or "" for ex in examples]
    kinds = [row["kind"] for row in _rows()]
    scores = {}
    for lam, cfg in config.items():
        jobs = [(p.full if lam else p.empty, p.empty, cfg, k) for k, p in enumerate(parts)]
        ledgers = generate_cid_many(default_lm, jobs, sample=False)
        answers = [default_lm.decode(ledger.response_ids) for ledger in ledgers]
        right = [_right(a, r) for a, r in zip(answers, refs)]
        scores[lam] = {
            "right": sum(right), "answers": answers,
            "by_kind": {k: sum(r for r, kk in zip(right, kinds) if kk == k) for k in set(kinds)},
            "f1": sum(token_f1(a, r) for a, r in zip(answers, refs)) / len(refs),
            "exact_match": sum(exact_match(a, r) for a, r in zip(answers, refs)) / len(refs)}
    n = len(examples)
    with capsys.disabled():
        for lam, label in ((0.0, "without the documents"), (1.0, "with the documents")):
            s = scores[lam]
            print(f"\ndemo-qa-large, {label}: {s['right']} of {n} answers contain the reference; "
                  f"mean token F1 {s['f1']:.3f}, exact match {s['exact_match']:.3f}; "
                  f"right by group {dict(sorted(s['by_kind'].items()))}")
            for k in range(3):
                print(f"  {examples[k].query} -> {s['answers'][k]!r} (reference {refs[k]!r})")
    assert scores[0.0]["right"] <= 0.05 * n
    assert scores[1.0]["right"] > scores[0.0]["right"]
