"""The proxy's per-document ledger (ctxleak.proxy.budget) on SQLite: reservations and
settlements by hand, budgets, concurrent reservers on one file, and a reservation surviving a
kill -9 of the process that holds it (a subprocess that imports only the ledger module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ctxleak.errors import ConfigError
from ctxleak.proxy.budget import Budgets, SQLiteLedger, open_ledger

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_reserve_settle_by_hand(tmp_path):
    ledger = open_ledger(f"sqlite:///{tmp_path}/l.db")  # tmp_path is absolute: 4 slashes
    budgets = Budgets(default=5.0, overrides={"b": 1.0})
    res = ledger.reserve("r1", ["a", "b", "a"], 2.0, budgets)
    assert res.granted == ("a",) and res.exhausted == ("b",)  # b's 1.0 cannot cover 2.0
    assert ledger.document("a").spent == 2.0 and ledger.document("a").reserved == 2.0
    ledger.settle("r1", 0.75)  # the answer spent 0.75 of the 2.0 reserved
    assert ledger.document("a").spent == 0.75 and ledger.document("a").reserved == 0.0
    ledger.settle("r1", 0.75)  # settled once only
    assert ledger.document("a").spent == 0.75
    # refuse mode: all or nothing
    res = ledger.reserve("r2", ["a", "b"], 2.0, budgets, all_or_nothing=True)
    assert res.granted == () and res.exhausted == ("b",)
    assert ledger.document("a").spent == 0.75
    # exactly at the budget fits (4.25 + 0.75 = 5), a hair more does not
    assert ledger.reserve("r3", ["a"], 4.25, budgets).granted == ("a",)
    assert ledger.reserve("r4", ["a"], 1e-6, budgets).exhausted == ("a",)
    # ex-post charging reserves 0: needs budget left, charges the excess on settling
    assert ledger.reserve("r5", ["b"], 0.0, budgets).granted == ("b",)
    ledger.settle("r5", 1.5)
    assert ledger.document("b").spent == 1.5
    assert ledger.reserve("r6", ["b"], 0.0, budgets).exhausted == ("b",)
    ledger.record_ex_post(["a", "a", "c"], 0.25)
    assert ledger.document("a").ex_post == 0.25 and ledger.document("c").spent == 0.0
    ledger.close()


def test_bad_ledger_and_budget_named(tmp_path):
    with pytest.raises(ConfigError, match="budget of 'x'") as caught:
        Budgets(default=1.0, overrides={"x": -1.0})
    assert caught.value.param == "budget"
    not_db = tmp_path / "notes.txt"
    not_db.write_text("my notes\n")
    with pytest.raises(ConfigError, match="not an SQLite database"):
        SQLiteLedger(not_db)
    assert not_db.read_text() == "my notes\n"  # never overwritten
    with pytest.raises(ConfigError, match="unknown ledger"):
        open_ledger("mysql://x/y")
    with pytest.raises(ConfigError, match="sqlite:////absolute"):
        open_ledger("sqlite://relative.db")
    with pytest.raises(ConfigError, match="finite"):
        SQLiteLedger(tmp_path / "l.db").reserve("r", ["a"], float("nan"), Budgets())


def test_concurrent_reservers_on_one_file_never_overspend(tmp_path):
    """Eight threads, each with its own connection, race for a budget of three reservations."""
    path = tmp_path / "shared.db"
    SQLiteLedger(path).close()
    budgets = Budgets(default=3.0)
    granted: list[int] = []
    barrier = threading.Barrier(8)

    def one(k: int) -> None:
        ledger = SQLiteLedger(path)
        barrier.wait()
        for j in range(3):
            if ledger.reserve(f"r{k}-{j}", ["doc"], 1.0, budgets).granted:
                granted.append(k)
        ledger.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(granted) == 3
    ledger = SQLiteLedger(path)
    assert ledger.document("doc").spent == 3.0
    assert len(ledger.open_reservations()) == 3


CHILD = """
import sys, time
from ctxleak.proxy.budget import Budgets, SQLiteLedger
ledger = SQLiteLedger(sys.argv[1])
ledger.reserve("held", ["doc"], 2.5, Budgets(default=4.0))
assert "torch" not in sys.modules and "fastapi" not in sys.modules, "the ledger imports too much"
print("reserved", flush=True)
time.sleep(60)
"""


def test_reservation_survives_kill_9(tmp_path):
    path = tmp_path / "crash.db"
    env = {**os.environ, "PYTHONPATH": SRC}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line.strip() == "reserved", child.stderr.read() if child.stderr else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    ledger = SQLiteLedger(path)
    # the half-written answer stays charged in full
    assert ledger.document("doc").spent == 2.5
    assert ledger.open_reservations() == [("held", "doc", 2.5)]
    assert ledger.reserve("next", ["doc"], 2.0, Budgets(default=4.0)).exhausted == ("doc",)
    assert ledger.reserve("next", ["doc"], 1.5, Budgets(default=4.0)).granted == ("doc",)


def test_cli_serve_parses_flags_and_calls_run_proxy(monkeypatch, tmp_path, capsys):
    """``ctxleak serve`` only parses: its flags reach ProxyConfig, the ledger and run_proxy."""
    from typer.testing import CliRunner

    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import app, main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: calls.setdefault("lm", (name, kw)))
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    monkeypatch.setenv("PROXY_KEY", "k3y")
    db = tmp_path / "cli.db"
    args = ["serve", "--upstream", "http://127.0.0.1:9", "--port", "8123", "--budget", "8",
            "--budget-for", "acct=7=2.5", "--ledger", f"sqlite:///{db}", "--on-exhausted",
            "refuse", "--api-key-env", "PROXY_KEY", "--max-tokens", "12"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # --upstream given: CID decodes over it (--decode auto)
    # (and sends it no key: none was named with --upstream-key-env, and no other is read)
    assert calls["lm"] == ("default", {"server_url": "http://127.0.0.1:9", "served_model": None,
                                       "request_timeout": 60.0, "api_key_env": None,
                                       "env_fallback": False})
    run = calls["run"]
    config = run["config"]
    assert run["port"] == 8123 and isinstance(run["ledger"], SQLiteLedger) and db.exists()
    assert config.budgets.of("acct=7") == 2.5 and config.budgets.of("other") == 8.0
    assert config.on_exhausted == "refuse" and config.api_key == "k3y"
    assert config.max_tokens == 12 and config.upstream == "http://127.0.0.1:9"
    for argv, said in [(["--budget-for", "acct"], "DOC_ID=EPSILON"),
                       (["--api-key-env", "NOT_SET_ANYWHERE_42"], "NOT_SET_ANYWHERE_42"),
                       (["--decode", "upstream"], "--upstream")]:
        with pytest.raises(SystemExit) as code:
            main(["serve", *argv])
        assert code.value.code == 2
        assert said in capsys.readouterr().err


def test_a_server_without_the_whole_distribution_is_refused_before_serving(tmp_path):
    """A plain OpenAI-compatible server gives log-probs of some tokens, not the whole next-token
    distributions CID mixes: create_app refuses it, naming what is missing and the vLLM flag."""
    from types import SimpleNamespace

    from ctxleak.engine.capabilities import SERVED, MissingCapability
    from ctxleak.proxy import create_app

    plain = SimpleNamespace(capabilities=SERVED, info=SimpleNamespace(
        name="m", base_url="http://127.0.0.1:9", source="served"))
    with pytest.raises(MissingCapability, match="--max-logprobs -1") as caught:
        create_app(plain, ledger=str(tmp_path / "l.db"))
    assert "whole next-token distribution" in str(caught.value)
    assert not (tmp_path / "l.db").exists()  # refused before the ledger was opened


def test_classes_hold_rest_and_listing_by_hand(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    budgets = Budgets(default=5.0, classes={"restricted": 2.0}, overrides={"own": 1.0})
    assert budgets.of("x", "restricted") == 2.0 and budgets.of("own", "restricted") == 1.0
    assert budgets.public("x", "public") and not budgets.public("own", "public")
    res = ledger.reserve("r1", ["a", "b"], 1.5, budgets, classes={"a": "restricted"})
    assert res.granted == ("a", "b") and res.held == {"a": 1.5, "b": 1.5}
    assert ledger.find("a").doc_class == "restricted" and ledger.find("a").budget == 2.0
    assert ledger.find("b").doc_class is None and ledger.find("b").budget == 5.0
    # the class first given stays: a later request calling it otherwise gets its budget
    assert ledger.reserve("r2", ["a"], 1.0, budgets, classes={"a": "other"}).exhausted == ("a",)
    assert ledger.find("a").doc_class == "restricted"
    # hold_rest: each document's whole remaining budget; none left: exhausted
    res = ledger.reserve("r3", ["b", "c"], 0.0, budgets, hold_rest=True)
    assert res.held == {"b": 3.5, "c": 5.0}
    assert ledger.reserve("r4", ["b"], 0.0, budgets, hold_rest=True).exhausted == ("b",)
    ledger.settle("r3", 0.25)  # its ex-post ε: the rest given back
    assert ledger.document("b").spent == 1.75 and ledger.document("c").spent == 0.25
    assert ledger.find("never-seen") is None
    assert ledger.document("never-seen").spent == 0.0  # document() keeps its zeros
    assert [d.doc_id for d in ledger.documents(0, 2)] == ["a", "b"]
    assert [d.doc_id for d in ledger.documents(2, 2)] == ["c"] and ledger.count() == 3
    # least left: a (2 - 1.5), b (5 - 1.75 with r1 still open), c (5 - 0.25)
    assert [(d.doc_id, d.remaining) for d in ledger.lowest_remaining(2)] == [("a", 0.5),
                                                                             ("b", 3.25)]
    assert ledger.find("b").reserved == 1.5  # r1 is still open
    ledger.close()


def test_a_ledger_from_before_classes_is_opened_and_kept(tmp_path):
    """A ledger file written before documents had classes gets the new columns, its rows
    kept (no class, no recorded budget)."""
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE ctxleak_spend (doc_id TEXT PRIMARY KEY, spent DOUBLE PRECISION "
               "NOT NULL DEFAULT 0, ex_post DOUBLE PRECISION NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO ctxleak_spend VALUES ('old', 2.5, 0.5)")
    db.commit()
    db.close()
    ledger = SQLiteLedger(path)
    row = ledger.find("old")
    assert (row.spent, row.ex_post, row.doc_class, row.budget) == (2.5, 0.5, None, None)
    assert ledger.reserve("r", ["old"], 1.0, Budgets(default=3.0)).exhausted == ("old",)
    assert ledger.reserve("r", ["old"], 0.5, Budgets(default=3.0)).granted == ("old",)
    assert ledger.find("old").budget == 3.0
    ledger.close()


def test_postgres_ledger_classes_hold_rest_and_listing():
    """The same by hand on PostgreSQL (the SQL that differs: row locks, its parameter style,
    the columns added to an older table)."""
    from helpers.proxy_server import postgres, postgres_tools

    why = postgres_tools()
    if why is not None:
        pytest.skip(why)
    from ctxleak.proxy.budget import PostgresLedger

    with postgres() as url:
        ledger = PostgresLedger(url)
        budgets = Budgets(default=5.0, classes={"restricted": 2.0})
        res = ledger.reserve("r1", ["b", "a"], 1.5, budgets, classes={"a": "restricted"})
        assert set(res.granted) == {"a", "b"}
        assert ledger.reserve("r2", ["a"], 1.0, budgets, classes={"a": "x"}).exhausted == ("a",)
        assert ledger.reserve("r3", ["c"], 0.0, budgets, hold_rest=True).held == {"c": 5.0}
        ledger.settle("r3", 0.25)
        assert [(d.doc_id, d.doc_class, d.remaining) for d in ledger.lowest_remaining(2)] == [
            ("a", "restricted", 0.5), ("b", None, 3.5)]
        assert [d.doc_id for d in ledger.documents(1, 5)] == ["b", "c"] and ledger.count() == 3
        assert ledger.find("a").reserved == 1.5 and ledger.find("zz") is None
        assert ledger.classes_of(["a", "b", "zz"]) == {"a": "restricted"}
        ledger.close()
        PostgresLedger(url).close()  # opened again: the schema (and its columns) kept
