"""A caller's share over a datastore in one row per caller (issue 84): a uniform charge across
every private document is kept as the caller's common figure, so an answer writes one caller
row, not one per document; the share still leaves a document out for that caller alone."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import SQLiteLedger


def _caller_rows(ledger: Any) -> int:
    return int(ledger._db.execute("SELECT COUNT(*) FROM ctxleak_caller_spend").fetchone()[0])


def _writes(ledger: Any) -> int | None:
    """SQLite's count of rows changed (None on PostgreSQL)."""
    return getattr(ledger._db, "total_changes", None)


def caller_share_checks(ledger: Any) -> None:
    budgets = Budgets(default=2.0, overrides={"a": 1.0})
    ids = ["a", "b", "c"]
    ledger.attach("s", {"a": 1.0, "b": 2.0, "c": 2.0})
    # share 0.5: u may spend 0.5 of a, 1.0 of b and of c; each answer charges 0.2 in common
    for k in range(2):
        before = _writes(ledger)
        res = ledger.reserve_common(f"r{k}", "s", ids, 0.2, {}, budgets, caller="u", share=0.5)
        assert res.exhausted == () and res.over_share == () and res.common == 0.2
        # the common row, its reservation and u's common row (made the first time): no
        # per-document row, for the ledger or for the caller
        if before is not None:
            assert _writes(ledger) - before == (3 if k else 4)
        ledger.settle(f"r{k}", 0.2)
    assert _caller_rows(ledger) == 0
    assert ledger.caller_spent("u") == pytest.approx({"a": 0.4, "b": 0.4, "c": 0.4})
    # a third 0.2 would take u to 0.6 of a, past its 0.5: a is left out for u (not exhausted:
    # 0.6 of its budget of 1.0 is spent in all), nothing is charged
    res = ledger.reserve_common("r2", "s", ids, 0.2, {}, budgets, caller="u", share=0.5)
    assert res.over_share == ("a",) and res.exhausted == () and res.held == {}
    assert ledger.document("a").spent == pytest.approx(0.4)
    assert ledger.caller_spent("u") == pytest.approx({"a": 0.4, "b": 0.4, "c": 0.4})
    # without a (detached, u's 0.4 of it folded into its row): b and c charged in common
    res = ledger.reserve_common("r3", "s", ["b", "c"], 0.2, {}, budgets, caller="u", share=0.5)
    assert res.over_share == () and res.exhausted == ()
    ledger.settle("r3", 0.2)
    assert ledger.caller_spent("u") == pytest.approx({"a": 0.4, "b": 0.6, "c": 0.6})
    # another caller v is not held back by u's share: a, detached, is charged as a row
    res = ledger.reserve_common("r4", "s", ["a", "b", "c"], 0.2, {"b": 0.3}, budgets,
                                caller="v", share=0.5)
    assert res.over_share == () and dict(res.held) == pytest.approx({"a": 0.2, "b": 0.3})
    ledger.settle("r4", dict(res.held))
    assert ledger.caller_spent("v") == pytest.approx({"a": 0.2, "b": 0.5, "c": 0.2})
    assert ledger.document("a").spent == pytest.approx(0.6)
    assert ledger.document("b").spent == pytest.approx(0.6 + 0.5)
    # attached again (a new process): a's caller rows start at minus each caller's common
    # figure, so every caller's figure of a stays what it was
    ledger.attach("s", {"a": 1.0, "b": 2.0, "c": 2.0})
    assert ledger.caller_spent("u") == pytest.approx({"a": 0.4, "b": 0.6, "c": 0.6})
    assert ledger.caller_spent("v") == pytest.approx({"a": 0.2, "b": 0.5, "c": 0.2})
    # a settlement that spent nothing gives u's common figure back with the documents'
    res = ledger.reserve_common("r5", "s", ["b", "c"], 0.2, {}, budgets, caller="u", share=0.5)
    ledger.settle("r5", 0.0)
    assert ledger.caller_spent("u")["b"] == pytest.approx(0.6)
    # a datastore that changed (another scope): u's figure of b moves with it
    ledger.attach("t", {"b": 2.0})
    assert ledger.caller_spent("u")["b"] == pytest.approx(0.6)
    assert ledger.caller_spent("v")["b"] == pytest.approx(0.5)


def test_a_callers_share_of_a_datastore_by_hand(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    caller_share_checks(ledger)
    ledger.close()


def test_a_callers_share_of_a_datastore_on_postgresql():
    from helpers.proxy_server import postgres, postgres_tools

    why = postgres_tools()
    if why is not None:
        pytest.skip(why)
    from ctxleak.proxy.budget import PostgresLedger

    with postgres() as url:
        ledger = PostgresLedger(url)
        caller_share_checks(ledger)
        ledger.close()


def test_a_share_without_a_caller_is_not_kept(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.attach("s", {"a": 1.0})
    res = ledger.reserve_common("r", "s", ["a"], 0.2, {}, Budgets(default=1.0))
    assert res.over_share == () and res.common == 0.2
    assert ledger._db.execute("SELECT COUNT(*) FROM ctxleak_caller_common").fetchone()[0] == 0
    ledger.close()


def test_a_caller_whose_share_is_spent_everywhere_detaches_nothing(tmp_path):
    """Alike charges reach a caller's share of every document at once: it is refused, and the
    documents stay on the common row, so other callers' answers still write no row each."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    budgets = Budgets(default=1.0)
    ids = [f"d{i}" for i in range(50)]
    ledger.attach("s", dict.fromkeys(ids, 1.0))
    ledger.settle("r0", dict(ledger.reserve_common("r0", "s", ids, 0.3, {}, budgets,
                                                   caller="u", share=0.5).held))
    res = ledger.reserve_common("r1", "s", ids, 0.3, {}, budgets, caller="u", share=0.5)
    assert set(res.over_share) == set(ids) and res.exhausted == ()  # 0.6 > 0.5 of each
    attached = ledger._db.execute("SELECT COUNT(*) FROM ctxleak_spend WHERE scope = 's'")
    assert attached.fetchone()[0] == 50
    before = ledger._db.total_changes
    res = ledger.reserve_common("r2", "s", ids, 0.3, {}, budgets, caller="v", share=0.5)
    assert res.over_share == () and ledger._db.total_changes - before == 4
    assert ledger.document("d7").spent == pytest.approx(0.6)
    assert ledger.caller_spent("u")["d7"] == pytest.approx(0.3)
    assert _caller_rows(ledger) == 0
    ledger.close()


def _rows_an_answer_writes(lm: Any, path: Any, n: int) -> tuple[int, int]:
    """Rows the second of two answers writes over ``n`` documents with a share of 0.5, and the
    documents it kept."""
    from helpers.proxy_server import serving_sqlite

    from ctxleak.mitigations.datastore import Datastore

    relevant = ["the capital of italy is rome", "rome is the capital of italy"]
    store = Datastore.of([(f"doc-{k}", relevant[k] if k < 2 else f"filler {k} zz")
                          for k in range(n)])
    with serving_sqlite(lm, path, mechanism="dp-rag:eps=5", datastore=store, caller_share=0.5,
                        budgets=Budgets(default=100.0), audit_seeds=True) as (url, ledger, _):
        for seed in (5, 6):
            before = ledger._db.total_changes
            r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
                "model": "tiny", "max_tokens": 2, "temperature": 0.8, "seed": seed,
                "messages": [{"role": "user", "content": "what is the capital of italy ?"}]})
            assert r.status_code == 200, r.text
        writes = ledger._db.total_changes - before
        kept = sum(1 for d in ledger.documents(0, n) if d.spent > 2 * 0.5 + 1e-9)
        assert ledger.caller_spent("anonymous")[f"doc-{n - 1}"] == pytest.approx(2 * 0.5)
    return writes, kept


def test_a_served_share_writes_the_same_rows_at_any_size(lm, tmp_path):
    small, large = (_rows_an_answer_writes(lm, tmp_path / f"{n}.db", n) for n in (500, 5000))
    assert small == large and small[0] < 60
