"""The bundled RAG audit example audited end to end on a tiny model: what is judged from the
answers' text alone (copies of a document, secrets and personal data found by the detectors)
holds whatever the model, so it is checked here against the example's ground truth; the
influence-based flags need the default model (tests/methods/rag/test_rag_audit_default.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

import ctxleak

FOLDER = Path(__file__).resolve().parents[3] / "src" / "ctxleak" / "data" / "demo" / "rag_audit"
TRUTH = json.loads((FOLDER / "truth.json").read_text())
COPYING = ("verbatim", "secret", "pii")


@pytest.fixture(scope="module")
def audit(llama_lm, tmp_path_factory):
    return ctxleak.influence(llama_lm, "demo-rag-log", lambda_=1.0, temperature=1.0,
                             min_new_tokens=0, class_budgets={"restricted": 0},
                             progress=False, output=tmp_path_factory.mktemp("audit") / "run")


def test_every_copying_answer_names_the_document_it_copied(audit) -> None:
    records = {r["id"]: r for r in audit.records}
    assert len(records) == len(TRUTH["turns"]) == 35
    for turn, truth in TRUTH["turns"].items():
        copied = {c["document"] for c in records[turn].get("copied") or ()}
        expected = {leak["document"] for leak in truth["leaks"] if leak["kind"] in COPYING}
        if truth["unrelated"]:
            assert copied == set(), turn
        assert expected <= copied, (turn, expected, copied)
        # no restricted document is said to be copied where the answer does not draw on it
        wrong = {d for d in copied - set(truth["uses"])
                 if TRUTH["documents"][d]["classification"] != "public"}
        assert not wrong, (turn, wrong)


def test_copying_answers_are_never_read_as_within_a_dp_budget(audit) -> None:
    verdict = audit.summary["verdict"]["text"]
    assert "strong budget" not in verdict
    for leak_doc in ("hr-salary-wirth", "it-db-credentials", "it-api-keys"):
        assert leak_doc in verdict
    # the leaks counted by class, so public documents' legitimate use reads apart
    docs = audit.summary["settings"][0]["document_control"]
    assert sum(docs["leaks_by_class"].values()) == docs["n_leaks"]
    assert docs["leaks_by_class"]["restricted"] >= 12  # the copies of restricted documents
    assert f"{docs['leaks_by_class']['restricted']} restricted" in verdict


def test_restricted_documents_rank_above_public_ones_and_fail_their_budget(audit) -> None:
    rows = audit.summary["settings"][0]["documents"]
    classes = [TRUTH["documents"][r["document"]]["classification"] for r in rows]
    last_restricted = max(i for i, c in enumerate(classes) if c == "restricted")
    first_public = min(i for i, c in enumerate(classes) if c == "public")
    assert last_restricted < first_public
    over = {d for _, d in audit.over_budget()}
    copied_restricted = {leak["document"] for t in TRUTH["turns"].values()
                         for leak in t["leaks"] if leak["kind"] in COPYING}
    assert copied_restricted <= over
    assert not any(TRUTH["documents"][d]["classification"] == "public" for d in over)
    lines = audit.budget_breaches()
    assert any("hr-salary-wirth" in line and "turn-" in line for line in lines)
    # a secret is never printed in the gate's lines
    assert not any("Qx7!vR2#mK9pL4zW" in line for line in lines)


def test_the_bundled_retriever_route_from_the_command_line(tiny_dir, tmp_path, capsys) -> None:
    """``--retriever retriever.py:retriever --data queries.jsonl``: the answers are generated,
    the documents come from the retriever with their ids and classes."""
    code, out, err = run_cli(["influence", "--model", tiny_dir, "--retriever",
                              f"{FOLDER / 'retriever.py'}:retriever", "--data",
                              str(FOLDER / "queries.jsonl"), "--limit", "3", "--lambda", "1",
                              "--temperature", "1", "--max-new-tokens", "4",
                              "--min-new-tokens", "1", "--class-budget", "restricted=100000",
                              "--output", str(tmp_path / "run")], capsys)
    assert code == 0, err
    result = ctxleak.load_result(tmp_path / "run")
    corpus = {json.loads(line)["id"] for line in (FOLDER / "corpus.jsonl").read_text()
              .splitlines() if line}
    assert len(result.records) == 3
    for record in result.records:
        assert len(record["passage_ids"]) == 3 and set(record["passage_ids"]) <= corpus
        assert record["response_source"] == "generated"
    rows = result.summary["settings"][0]["documents"]
    assert {r["class"] for r in rows} <= {"public", "internal", "restricted"}
    assert all(r["document"] in corpus for r in rows)
