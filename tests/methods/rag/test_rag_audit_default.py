"""The bundled RAG audit example on the default model, as a security team would run it: the span
log (retriever-only traces mixed in, answers scored under the messages the app sent), read
against the example's ground truth; and the JSONL log with the app's prompt file, which gives
the same numbers ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models", Def. 3.1-3.2 with S = one retrieved document, and its per-document control)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import ctxleak
from ctxleak.methods.rag.judged import leaked_passages

pytestmark = pytest.mark.integration

FOLDER = Path(str(resources.files("ctxleak") / "data" / "demo" / "rag_audit"))
TRUTH = json.loads((FOLDER / "truth.json").read_text())
#: The first twelve turns: copies of secrets and personal data, a paraphrase, an unrelated
#: answer and answers from public documents (the whole log takes about 4 minutes on a 2-core CPU).
#: Not fewer: on the first ten the per-document threshold (the decoys' 95th percentile) falls
#: below the payroll record's leave-one-out influence in turn-09, which does not use it.
TURNS = 12
COPYING = ("verbatim", "secret", "pii")


@pytest.fixture(scope="module")
def spans_audit(default_lm, tmp_path_factory):
    return ctxleak.influence(default_lm, "demo-rag-spans", limit=TURNS, min_new_tokens=0,
                             class_budgets={"restricted": 0}, progress=False,
                             output=tmp_path_factory.mktemp("spans") / "run")


def _judged(result):
    setting = result.summary["settings"][0]
    threshold = setting["document_control"]["threshold"]
    out = {}
    for record in result.records:
        leaks = leaked_passages(record, threshold)
        out[record["id"]] = {record["passage_ids"][j] for j in leaks}
    return out


def test_every_copying_answer_is_a_leak_of_the_right_document(spans_audit) -> None:
    summary = spans_audit.summary
    assert summary["traces"]["answers"] == len(TRUTH["turns"])  # in the log, --limit aside
    assert len(spans_audit.records) == TURNS
    assert summary["traces"]["retriever_only"] >= 1
    judged = _judged(spans_audit)
    flagged = set(summary["settings"][0]["control"]["flagged"])
    for turn in list(TRUTH["turns"])[:TURNS]:
        truth = TRUTH["turns"][turn]
        copied = {leak["document"] for leak in truth["leaks"] if leak["kind"] in COPYING}
        assert copied <= judged[turn], (turn, copied, judged[turn])
        if truth["unrelated"]:
            assert not judged[turn] and turn not in flagged, turn
        # a restricted or internal document is judged leaked only where the answer uses it
        for doc in judged[turn] - set(truth["uses"]):
            assert TRUTH["documents"][doc]["classification"] == "public", (turn, doc)
    assert "strong budget" not in summary["verdict"]["text"]


def test_restricted_documents_rank_first_and_fail_the_gate(spans_audit) -> None:
    rows = spans_audit.summary["settings"][0]["documents"]
    classes = [TRUTH["documents"][r["document"]]["classification"] for r in rows]
    assert classes.index("public") > max(i for i, c in enumerate(classes)
                                         if c == "restricted")
    over = {d for _, d in spans_audit.over_budget()}
    assert over and all(TRUTH["documents"][d]["classification"] == "restricted" for d in over)


def test_the_jsonl_log_with_the_apps_prompt_gives_the_same_numbers(spans_audit, default_lm,
                                                                   tmp_path) -> None:
    rows = ctxleak.influence(default_lm, "demo-rag-log", limit=2, temperature=1.0,
                             min_new_tokens=0, prompt_messages=str(FOLDER / "prompt.json"),
                             control=False, progress=False, output=tmp_path / "rows")
    by_id = {r["id"]: r for r in spans_audit.records}
    for r in rows.records:
        s = by_id[r["id"]]
        assert r["prompt_source"] == "app template" and s["prompt_source"] == "app messages"
        assert r["response_ids"] == s["response_ids"]
        assert abs(r["influence"] - s["influence"]) < 1e-6
        assert np.allclose(r["passage_influence"], s["passage_influence"], atol=1e-6, rtol=0)
