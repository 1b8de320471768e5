"""The mixed sweep of every mitigation on the default model, on a few questions of the larger QA
set: plain CID (λ = 1), bounded CID, and each mechanism by name, in one run; every mode
answers every question, every record carries its claim, and the frontier (table, plot,
recommendation) comes out of the same run, saying that a few questions do not resolve utility
differences."""

from __future__ import annotations

import pytest

import ctxleak
from ctxleak.methods.influence.data import load_examples

MECHANISMS = ["dp-vote:eps=2,shards=4", "dp-sparse-vote:eps=2,shards=4", "dp-rag:eps=5",
              "scrub:operator=replace"]
# the votes and DP-RAG retrieve from the questions' documents pooled into a datastore: each
# claim is per document of it
RELATIONS = {"dp-vote": "document", "dp-sparse-vote": "document", "dp-rag": "document",
             "scrub": "none"}
# one question: what the sweep proves holds per question (each mode answers it, each record
# carries its claim), and the frontier says one question resolves nothing; no control contexts
# (the control is the same code for every mode, tested on the spans audit and the fast tier)
QUESTIONS = 1


@pytest.mark.integration
def test_the_mixed_sweep_runs_every_mode_on_the_default_model(default_lm, tmp_path):
    out = tmp_path / "sweep"
    result = ctxleak.influence(default_lm, "demo-qa-large", limit=QUESTIONS, lambda_=1,
                               bounded_eps="none,2", mechanisms=MECHANISMS, max_new_tokens=8,
                               control=False, progress=False, output=str(out))
    settings = result.summary["settings"]
    pooled = {d.id for ex in load_examples("demo-qa-large")[:QUESTIONS] for d in ex.documents}
    assert len(settings) == 2 + len(MECHANISMS)
    assert all(s["n"] == QUESTIONS for s in settings)
    by_mode = {s.get("mechanism"): s for s in settings}
    for spec in MECHANISMS:
        name = spec.split(":")[0]
        mode = next(s for k, s in by_mode.items() if k and k.startswith(name + "("))
        assert mode["claim"]["relation"] == RELATIONS[name]
        if "eps=" in spec:  # what a DP mechanism claims stays within its budget
            assert mode["claim"]["eps"]["mean"] <= float(spec.split("eps=")[1].split(",")[0]) \
                + 1e-9
        if name.startswith("dp-"):  # its own ex-post loss of each of the question's documents
            spent = mode["document_loss"]
            assert spent["documents"] == 4 * QUESTIONS == spent["within_claim"]
    for record in result.records:
        assert record["claim_relation"] in ("none", "context", "shard", "document")
        assert record["tokens_paid"] <= len(record["response_ids"]) + 1
        assert len(record["passage_influence"]) == 4  # every document left out, scored
        if (record.get("mechanism") or "").startswith("dp-vote"):  # one document per voter
            assert 1 <= len(record["datastore_used"]) <= 4
            assert set(record["datastore_used"]) <= pooled
    front = result.summary["frontier"]
    assert [r["setting"] for r in front["rows"]] == [s["setting"] for s in settings]
    assert front["recommended"] is None and "not resolved" in front["recommendation"]
    assert (out / "frontier.png").is_file()
