"""DP-KSA ("Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and
Annavaram) as a decoding mode of the influence run and a setting of its frontier, on a tiny
model over the pooled datastore: each record carries the claim over the datastore's documents
and each document's own loss within it, and the frontier has a row for it."""

from __future__ import annotations

import pytest

import ctxleak

ROWS = [{"id": f"q{i}", "query": q, "reference": r,
         "documents": [{"id": f"q{i}-d{j}", "text": t} for j, t in enumerate(docs)]}
        for i, (q, r, docs) in enumerate((
            ("where is rome ?", "italy", ["rome is in italy .", "paris is in france ."]),
            ("who is the doctor ?", "anna", ["the doctor is anna .", "berlin is big .",
                                             "one page ."]),
            ("what is the news ?", "rain", ["the news is rain .", "the city is old ."])))]
KW = dict(max_new_tokens=4, min_new_tokens=0, temperature=1.0, seed=3, progress=False)


def test_dp_ksa_in_the_sweep_and_on_the_frontier(llama_lm, tmp_path):
    result = ctxleak.influence(llama_lm, ROWS, mechanisms="dp-ksa:eps=6,shards=3,voter_tokens=4",
                               output=str(tmp_path / "run"), **KW)
    mine = [r for r in result.records if (r.get("mechanism") or "").startswith("dp-ksa")]
    assert len(mine) == len(ROWS)
    for record, row in zip(mine, ROWS):
        assert (record["claim_eps"], record["claim_delta"], record["claim_relation"]) == \
            (6.0, 1e-4, "document")
        assert record["tokens_paid"] == 0
        release = record["mechanism_steps"][0]
        assert release["source"] == "propose-test-release" and len(release["voter_keywords"]) == 3
        assert [s["token_id"] for s in record["mechanism_steps"][1:]] == record["response_ids"]
        assert list(record["document_loss"]) == [d["id"] for d in row["documents"]]
        assert all(abs(v) <= 6.0 + 1e-9 for v in record["document_loss"].values())
    setting = next(s for s in result.summary["settings"] if s.get("mechanism"))
    assert setting["claim"]["relation"] == "document"
    assert setting["claim"]["eps"]["mean"] == pytest.approx(6.0)
    assert setting["document_loss"]["documents"] == 7
    assert setting["document_loss"]["within_claim"] == 7
    rows = {r["label"]: r for r in result.summary["frontier"]["rows"]}
    key = "dp-ksa(eps=6,shards=3,delta=0.0001,voter_tokens=4)"
    assert rows[key]["relation"] == "document"
    assert rows[key]["eps_guarantee"] == pytest.approx(6.0)
