"""The proxy's DP-RAG over a datastore decodes no more streams than ``--max-streams`` was
checked against (issue 84): documents tied at the threshold (here twelve of the same text,
which every threshold keeps) are cut to ``top_k``, the first listed."""

from __future__ import annotations

import json
import logging

import httpx
from helpers.proxy_server import serving_sqlite

from ctxleak.mitigations.datastore import Datastore
from ctxleak.proxy import Budgets


def test_tied_documents_are_cut_to_top_k(lm, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    store = Datastore(tuple((f"tie-{i:02d}", "rome is the capital of italy") for i in range(12))
                      + (("other", "bread and butter"),))
    with serving_sqlite(lm, tmp_path / "l.db", datastore=store, max_streams=3,
                        mechanism="dp-rag:eps=5,top_k=2,score_range=0:0.05,grid=4",
                        budgets=Budgets(default=100.0), audit_seeds=True) as (url, ledger, _):
        for seed in (1, 2):
            caplog.clear()
            r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
                "model": "tiny", "max_tokens": 2, "temperature": 0.8, "seed": seed,
                "messages": [{"role": "user", "content": "what is the capital of italy ?"}]})
            assert r.status_code == 200, r.text
            line = next(json.loads(rec.getMessage()) for rec in caplog.records
                        if '"event": "mechanism"' in rec.getMessage())
            assert line["documents_used"] == ["tie-00", "tie-01"]
        # the two kept are charged the whole claim, the ten others tied with them only the
        # threshold's ε (0.5), twice
        assert ledger.document("tie-05").spent == 2 * 0.5
        assert ledger.document("tie-00").spent > 2 * 0.5
