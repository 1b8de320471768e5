"""An answer whose size does not grow with the datastore (issue 84): its body, headers,
request-log line and ledger writes are the same at 2,000 and 20,000 documents. DP-RAG charges
its retrieval's ε to every private document: the ledger keeps that in one common row
(:mod:`ctxleak.proxy.ledger_common`), each document's spend the common figure plus its own row,
and writes rows only for the documents charged more."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from helpers.proxy_server import chat_body, serving_sqlite

from ctxleak.mitigations.datastore import Datastore
from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import SQLiteLedger

QUESTION = "what is the capital of italy ?"
RELEVANT = ["the capital of italy is rome", "rome is the capital of italy",
            "the capital of france is paris", "italy has a long coast"]


def store(n: int) -> Datastore:
    """``n`` documents: four that share words with the question, the rest filler."""
    return Datastore.of([(f"doc-{k}", RELEVANT[k] if k < len(RELEVANT) else f"filler {k} zz")
                         for k in range(n)])


def answer_sizes(lm: Any, tmp_path: Any, n: int, caplog: Any) -> dict[str, Any]:
    """Three answers over ``n`` documents (seeds chosen, an audit: the same retrieval's noise
    at both sizes): the second's body, header bytes, log line and the
    rows the ledger wrote for it (SQLite's count of rows changed), and the ledger after."""
    with serving_sqlite(lm, tmp_path / f"l{n}.db", mechanism="dp-rag:eps=5", datastore=store(n),
                        budgets=Budgets(default=100.0), audit_seeds=True) as (url, ledger, _):
        out: dict[str, Any] = {}
        for k in range(3):
            caplog.clear()
            before = ledger._db.total_changes
            r = httpx.post(url + "/v1/chat/completions", timeout=300, json=chat_body(
                None, QUESTION, max_tokens=3, temperature=0.8, seed=11 + k))  # (same at both n)
            assert r.status_code == 200, r.text
            if k == 1:
                out["writes"] = ledger._db.total_changes - before
                out["body"] = len(r.content)
                out["headers"] = sum(len(a) + len(b) for a, b in r.headers.raw)
                lines = [rec.getMessage() for rec in caplog.records
                         if '"event": "mechanism"' in rec.getMessage()]
                assert len(lines) == 1
                out["line"] = lines[0]
        out["filler"] = ledger.document(f"doc-{n - 1}")
        out["count"] = ledger.count()
        out["common"] = ledger.common_spent(next(iter(_scopes(ledger))))
    return out


def _scopes(ledger: SQLiteLedger) -> list[str]:
    return [s for (s,) in ledger._db.execute("SELECT scope FROM ctxleak_common")]


def test_an_answers_size_and_ledger_writes_do_not_grow_with_the_datastore(lm, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ctxleak.proxy")
    small, large = (answer_sizes(lm, tmp_path, n, caplog) for n in (2000, 20000))
    for sizes, n in ((small, 2000), (large, 20000)):
        logged = json.loads(sizes["line"])
        assert logged["documents"]["count"] == n and len(logged["documents"]["sha256"]) == 16
        assert logged["dropped"] == 0
        # only the documents charged more than the common ε, each a ledger row: per answer,
        # 2 writes for the common row (charge, settle), 2 for its reservation (made, deleted),
        # 2 for the caller's common row (charge, settle), and 6 for each document charged more
        # (its row charged and settled, its caller row charged and settled, its reservation
        # made and deleted)
        extra = logged["charged"]
        assert sizes["writes"] == 6 + 6 * len(extra), (sizes["writes"], extra)
        assert set(extra) <= set(logged["documents_used"]) | set(extra)
        assert logged["charged_common"] == pytest.approx(0.5)  # dp-rag:eps=5's ε_ret
        # a document no answer read spent the common ε of each of the 3 answers, and the
        # ledger's reads say so though it was written once (when attached)
        assert sizes["filler"].spent == pytest.approx(3 * 0.5)
        assert sizes["filler"].budget == 100.0 and sizes["count"] == n
        assert sizes["common"] == pytest.approx(1.5)
    # the same relevant documents at both sizes: the same rows written, the same log line but
    # for the count's digit, the same body and headers give or take the answer's own tokens
    assert set(json.loads(small["line"])["charged"]) == set(json.loads(large["line"])["charged"])
    assert small["writes"] == large["writes"] < 40
    line_wo = [len(s["line"]) - len(json.dumps(json.loads(s["line"])["documents_used"]))
               for s in (small, large)]
    assert abs(line_wo[0] - line_wo[1]) <= 40  # (the id and seed differ by a few digits)
    assert max(small["body"], large["body"]) < 2000 and abs(small["body"] - large["body"]) < 200
    assert max(small["headers"], large["headers"]) < 1500


def common_row_checks(ledger: Any) -> None:
    """By hand: a (budget 1), b (2), c (no limit) attached; every answer charges 0.6 in common,
    b 0.5 more in the first."""
    budgets = Budgets(default=2.0, overrides={"a": 1.0})
    ids = ["a", "b", "c"]
    assert ledger.attach("s", {"a": 1.0, "b": 2.0, "c": None}) == 3
    assert ledger.attach("s", {"a": 1.0, "b": 2.0, "c": None}) == 0  # (already attached)
    res = ledger.reserve_common("r1", "s", ids, 0.6, {"b": 0.5}, budgets)
    assert res.exhausted == () and dict(res.held) == {"b": 0.5} and res.common == 0.6
    assert ledger.document("a").spent == pytest.approx(0.6)
    assert ledger.document("a").reserved == pytest.approx(0.6)
    assert ledger.document("b").spent == pytest.approx(1.1)
    assert ledger.document("b").reserved == pytest.approx(1.1)
    ledger.settle("r1", dict(res.held))
    assert ledger.document("b").reserved == 0.0 and ledger.document("b").spent == pytest.approx(1.1)
    assert ledger.common_spent("s") == pytest.approx(0.6)
    # a would reach 1.2 > 1.0: nothing charged, a detached with its 0.6 and out of the answer
    res = ledger.reserve_common("r2", "s", ids, 0.6, {}, budgets)
    assert res.exhausted == ("a",) and res.held == {}
    assert ledger.common_spent("s") == pytest.approx(0.6)
    assert ledger.document("a").spent == pytest.approx(0.6)
    # without a: a keeps 0.6 (detached), b and c are charged the common 0.6
    res = ledger.reserve_common("r3", "s", ["b", "c"], 0.6, {}, budgets)
    assert res.exhausted == () and res.held == {}
    assert ledger.document("a").spent == pytest.approx(0.6)
    assert ledger.document("b").spent == pytest.approx(1.7)
    assert ledger.document("c").spent == pytest.approx(1.2)
    # nothing released: the reservation is given back
    ledger.settle("r3", 0.0)
    assert ledger.document("b").spent == pytest.approx(1.1)
    assert ledger.document("c").spent == pytest.approx(0.6)
    # a detached document still in an answer is charged the common amount in its own row
    res = ledger.reserve_common("r4", "s", ["a", "b"], 0.3, {}, budgets)
    assert dict(res.held) == {"a": pytest.approx(0.3)}
    assert ledger.document("a").spent == pytest.approx(0.9)
    assert ledger.document("b").spent == pytest.approx(1.4)
    # the lowest remaining budgets read the common spend: a has 0.1 left, b 0.6
    assert [r.doc_id for r in ledger.lowest_remaining(2)] == ["a", "b"]
    ledger.settle("r4", dict(res.held))
    # c, attached, left out of an answer: detached with what it spent, not charged this one
    res = ledger.reserve_common("r5", "s", ["b"], 0.1, {}, budgets)
    assert res.exhausted == () and res.held == {}
    assert ledger.document("c").spent == pytest.approx(0.6)
    assert ledger.document("b").spent == pytest.approx(1.5)


def test_the_common_row_charges_detaches_and_gives_back(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    before = ledger._db.total_changes
    common_row_checks(ledger)
    # rows written, by hand: attaching 1 common row + 3 documents (again: 0); r1 4 (the
    # common row and its reservation, b's row and its reservation) and 4 to settle them; r2 1
    # (a detached); r3 2 and 2 to give them back; r4 4 (common 2, a's row and reservation) and
    # 4 to settle them; r5 3 (c detached, the common row and its reservation)
    assert ledger._db.total_changes - before == 4 + 0 + 4 + 4 + 1 + 2 + 2 + 4 + 4 + 3
    ledger.close()


def test_the_common_row_on_postgresql():
    from helpers.proxy_server import postgres, postgres_tools

    why = postgres_tools()
    if why is not None:
        pytest.skip(why)
    from ctxleak.proxy.budget import PostgresLedger

    with postgres() as url:
        ledger = PostgresLedger(url)
        common_row_checks(ledger)
        ledger.close()


def test_attaching_keeps_what_a_document_had_spent(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    budgets = Budgets(default=5.0)
    ledger.settle(ledger.reserve("r0", ["x"], 1.25, budgets).request_id, 1.25)
    ledger.attach("s", {"x": 5.0, "y": 5.0})
    assert ledger.document("x").spent == pytest.approx(1.25)
    ledger.settle("r1", dict(ledger.reserve_common("r1", "s", ["x", "y"], 0.5, {}, budgets).held))
    assert ledger.document("x").spent == pytest.approx(1.75)
    # attached to another scope (a changed datastore): its common spend folded in, kept
    ledger.attach("t", {"x": 5.0})
    assert ledger.document("x").spent == pytest.approx(1.75)
    assert ledger.document("y").spent == pytest.approx(0.5)  # (still in s)
    ledger.close()
