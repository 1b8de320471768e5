"""No caller can exhaust a document: per-caller shares of each document's budget, kept by the
ledger in the reservation's transaction (SQLite, and PostgreSQL where its tools are here), and
per-caller rates; callers named by their key (and an app's end-user header); the callers' keys
file refused by line; ``/metrics`` per caller with as many labels as keys."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from helpers.proxy_server import serving_sqlite

from ctxleak.errors import ConfigError, InputError
from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.budgets import share_hold
from ctxleak.proxy.callers import RateLimited, RateLimiter, identify, read_caller_keys
from ctxleak.proxy.request import ProxyError

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "faq-2", "text": "the doctor said the capital of italy is rome"}]
KEYS = {"key-alice": "alice", "key-bob": "bob"}


def ask(url: str, key: str, marked: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=60,
                      headers={"authorization": f"Bearer {key}", **(headers or {})},
                      json={"model": "tiny", "messages": [{"role": "user", "content": "name?"}],
                            "ctxleak": {"documents": DOCS[:1], "epsilon": 0.5,
                                        **(marked or {})}, "max_tokens": 1, **body})


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[1])
    return None


# ---- the ledger's share --------------------------------------------------------------------

def test_share_hold_by_hand():
    """share × budget is what one caller may hold; 10 × 0.5 = 5."""
    assert share_hold(1.0, 10.0, 0.5, 4.0) == 1.0  # 4 + 1 = 5: exactly the share
    assert share_hold(1.0, 10.0, 0.5, 4.5) is None  # 4.5 + 1 > 5
    assert share_hold(0.0, 10.0, 0.5, 4.9) == 0.0 and share_hold(0.0, 10.0, 0.5, 5.0) is None
    assert share_hold(8.0, 10.0, 0.5, 2.0, hold_rest=True) == 3.0  # the rest of the share
    assert share_hold(8.0, None, 0.5, 1e9) == 8.0  # no budget: no share limit


def share_round(ledger: Any) -> None:
    """Budget 10, share 0.5, 1 a reservation: alice gets 5, then only her share is spent;
    bob still gets the document; a settlement gives the caller back what it gives the
    document."""
    budgets = Budgets(default=10.0)
    for k in range(5):
        res = ledger.reserve(f"a{k}", ["d"], 1.0, budgets, caller="alice", share=0.5)
        assert res.granted == ("d",) and res.over_share == ()
    res = ledger.reserve("a5", ["d"], 1.0, budgets, caller="alice", share=0.5)
    assert res.granted == () and res.over_share == ("d",) and res.exhausted == ()
    assert ledger.document("d").spent == pytest.approx(5.0)
    res = ledger.reserve("b0", ["d"], 1.0, budgets, caller="bob", share=0.5)
    assert res.granted == ("d",)
    ledger.settle("a0", 0.25)  # alice's first answer spent 0.25 of its 1: 0.75 back to both
    assert ledger.caller_spent("alice") == {"d": pytest.approx(4.25)}
    assert ledger.document("d").spent == pytest.approx(5.25)
    assert ledger.caller_spent("bob") == {"d": pytest.approx(1.0)}
    # 4.25 + 1 > 5: still over; 0.75 fits exactly
    assert ledger.reserve("a6", ["d"], 1.0, budgets, caller="alice",
                          share=0.5).over_share == ("d",)
    assert ledger.reserve("a7", ["d"], 0.75, budgets, caller="alice",
                          share=0.5).granted == ("d",)
    # all or nothing: a document over the caller's share refuses the whole reservation
    res = ledger.reserve("a8", ["d", "e"], 0.5, budgets, caller="alice", share=0.5,
                         all_or_nothing=True)
    assert res.granted == () and res.over_share == ("d",)
    assert ledger.document("e").spent == 0
    # an unbounded spend holds what is left of the share, not of the budget
    res = ledger.reserve("b1", ["e"], 0.0, budgets, caller="bob", share=0.5, hold_rest=True)
    assert res.held == {"e": pytest.approx(5.0)}
    ledger.settle("b1", 7.0)  # an ex-post spend past the hold: charged in full to both
    assert ledger.caller_spent("bob")["e"] == pytest.approx(7.0)
    assert ledger.document("e").spent == pytest.approx(7.0)
    with pytest.raises(ConfigError, match="share"):
        ledger.reserve("x", ["d"], 1.0, budgets, caller="bob", share=1.5)


def test_a_callers_share_in_the_sqlite_ledger(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    share_round(ledger)
    ledger.close()


def test_a_callers_share_in_the_postgres_ledger():
    from helpers.proxy_server import postgres, postgres_tools

    why = postgres_tools()
    if why:
        pytest.skip(why)
    from ctxleak.proxy.budget import PostgresLedger

    with postgres() as url:
        ledger = PostgresLedger(url)
        share_round(ledger)
        ledger.close()


def test_a_ledger_made_before_callers_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE ctxleak_reservation (request_id TEXT NOT NULL, doc_id TEXT NOT "
               "NULL, amount DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL, "
               "PRIMARY KEY (request_id, doc_id))")
    db.execute("INSERT INTO ctxleak_reservation VALUES ('old', 'd', 2.0, 0)")
    db.commit()
    db.close()
    ledger = SQLiteLedger(path)
    ledger.settle("old", 1.0)  # an open reservation of an old ledger: no caller, settled
    assert ledger.reserve("n", ["d"], 1.0, Budgets(default=3.0), caller="c",
                          share=1.0).granted == ("d",)
    assert ledger.caller_spent("c") == {"d": 1.0}
    ledger.close()


# ---- who the caller is ---------------------------------------------------------------------

def test_identify_by_key_default_anonymous_and_header():
    assert identify("Bearer key-bob", None, KEYS, None, None).name == "bob"
    assert identify("Bearer key-eve", None, KEYS, None, None) is None
    assert identify("", None, KEYS, None, None) is None
    assert identify("Bearer main", "main", KEYS, None, None).name == "default"
    assert identify("", None, {}, None, None).name == "anonymous"
    user = identify("Bearer key-bob", None, KEYS, "x-ctxleak-user", "u-17")
    assert (user.name, user.label) == ("bob/u-17", "bob")
    assert identify("Bearer key-bob", None, KEYS, "x-ctxleak-user", None).name == "bob"
    for bad in ("", "a\x00b", "x" * 65, " padded"):
        with pytest.raises(ProxyError) as err:
            identify("Bearer key-bob", None, KEYS, "x-ctxleak-user", bad)
        assert err.value.status == 400 and err.value.param == "x-ctxleak-user"


def test_the_caller_keys_file(tmp_path):
    good = tmp_path / "callers.jsonl"
    good.write_text('{"caller": "alice", "key_env": "ALICE_KEY"}\n'
                    '{"caller": "bob", "key": "key-bob"}\n')
    assert read_caller_keys(good, {"ALICE_KEY": "key-alice"}) == KEYS
    csv = tmp_path / "callers.csv"
    csv.write_text("caller,key_env\nalice,ALICE_KEY\n")
    assert read_caller_keys(csv, {"ALICE_KEY": "k1"}) == {"k1": "alice"}
    rows = {  # the bad row (line 2), its field
        '{"caller": "bob"}': "key_env",
        '{"caller": "bob", "key": "k", "key_env": "B"}': "key_env",
        '{"caller": "bob", "key_env": "UNSET_HERE"}': "key_env",
        '{"caller": "bob", "key": "key-alice"}': "key",
        '{"caller": "a/b", "key": "k"}': "caller",
        '{"key": "k"}': "caller",
    }
    for row, field in rows.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"caller": "alice", "key": "key-alice"}\n' + row + "\n")
        with pytest.raises(InputError) as err:
            read_caller_keys(bad, {})
        assert (err.value.line, err.value.field) == (2, field), (row, str(err.value))
        assert str(bad) in str(err.value)


def test_bad_caller_settings_are_refused():
    for settings, param in [({"caller_share": 0.0}, "caller_share"),
                            ({"caller_share": 1.5}, "caller_share"),
                            ({"caller_rate": 0}, "caller_rate"),
                            ({"caller_rate": math.inf}, "caller_rate"),
                            ({"caller_header": "authorization"}, "caller_header"),
                            ({"caller_header": "x user"}, "caller_header"),
                            ({"caller_keys": {"k": "a/b"}}, "caller_keys"),
                            ({"caller_keys": {"k": "a"}, "api_key": "k"}, "caller_keys")]:
        with pytest.raises(ConfigError) as err:
            ProxyConfig(**settings)
        assert err.value.param == param
    assert ProxyConfig(caller_header="X-Ctxleak-User").caller_header == "x-ctxleak-user"


# ---- rates ---------------------------------------------------------------------------------

def test_the_token_bucket_by_hand():
    """3 a minute: a burst of 3, then one every 20 s."""
    now = [100.0]
    bucket = RateLimiter(3, clock=lambda: now[0])
    assert [bucket.wait("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.wait("a") == pytest.approx(20.0)
    assert bucket.wait("b") == 0.0  # another caller's bucket is its own
    now[0] += 5.0
    assert bucket.wait("a") == pytest.approx(15.0)
    now[0] += 15.0
    assert bucket.wait("a") == 0.0 and bucket.wait("a") == pytest.approx(20.0)
    with pytest.raises(RateLimited) as err:
        bucket.check("a")
    assert err.value.headers == {"retry-after": "20"} and err.value.code == "rate_limited"


def test_the_n_plus_first_request_in_a_minute_is_429_with_retry_after(lm, tmp_path):
    now = [0.0]
    with serving_sqlite(lm, tmp_path / "l.db", caller_keys=KEYS, caller_rate=2,
                        budgets=Budgets(default=100.0)) as (url, ledger, app):
        app.state.proxy.limiter.clock = lambda: now[0]
        assert [ask(url, "key-alice").status_code for _ in range(2)] == [200, 200]
        third = ask(url, "key-alice")
        assert third.status_code == 429 and third.json()["error"]["code"] == "rate_limited"
        assert third.headers["retry-after"] == "30"  # 2 a minute: one more in 30 s
        assert ask(url, "key-bob").status_code == 200  # bob's own bucket
        assert ledger.caller_spent("alice")["acct-7"] == pytest.approx(
            ledger.document("acct-7").spent - ledger.caller_spent("bob")["acct-7"])
        now[0] = 30.0
        assert ask(url, "key-alice").status_code == 200
        text = httpx.get(url + "/metrics").text
        assert metric(text, 'ctxleak_proxy_caller_rate_limited_total{caller="alice"}') == 1
        assert metric(text, 'ctxleak_proxy_caller_requests_total{caller="alice"}') == 4
        assert metric(text, "ctxleak_proxy_caller_rate") == 2
        assert metric(text, "ctxleak_proxy_caller_share") == 1


# ---- the must-hold -----------------------------------------------------------------

def test_one_caller_of_200_questions_leaves_the_others_their_share(lm, tmp_path):
    """Budget 10, share 0.5, bounded CID at ε 0.5 × (max_tokens 1 + 1) = 1 reserved per
    answer: alice's 200 questions are all answered, the document used only while her share
    lasts, so it keeps ≥ 5 unspent; bob then gets answers that use it and is charged."""
    with serving_sqlite(lm, tmp_path / "l.db", caller_keys=KEYS, caller_share=0.5,
                        budgets=Budgets(default=10.0)) as (url, ledger, app):
        with httpx.Client(timeout=60) as client:
            for _ in range(200):
                got = client.post(url + "/v1/chat/completions",
                                  headers={"authorization": "Bearer key-alice"},
                                  json={"model": "tiny", "max_tokens": 1,
                                        "messages": [{"role": "user", "content": "name?"}],
                                        "ctxleak": {"documents": DOCS, "epsilon": 0.5}})
                assert got.status_code == 200, got.text
        for doc in ("acct-7", "faq-2"):
            row = ledger.document(doc)
            # she could not reserve 1 more: what she spent is in (4, 5]
            assert 4.0 < ledger.caller_spent("alice")[doc] <= 5.0 + 1e-9
            assert row.spent == pytest.approx(ledger.caller_spent("alice")[doc])
            assert row.budget - row.spent >= 5.0 - 1e-9 and row.reserved == 0
        before = ledger.document("acct-7").spent
        for _ in range(3):
            assert ask(url, "key-bob").status_code == 200
        spent = ledger.caller_spent("bob")["acct-7"]
        assert 3 * 0.5 <= spent <= 3 * 1.0 + 1e-9  # each answer spends 0.5 or 1 (EOS)
        assert ledger.document("acct-7").spent == pytest.approx(before + spent)
        text = httpx.get(url + "/metrics").text
        # both documents left out of each request past her share; at most 10 of hers used
        # them (each spends at least 0.5 of her 5): at least 190 requests × 2 documents
        refused = metric(text, 'ctxleak_proxy_caller_share_spent_total{caller="alice"}')
        assert 380 <= refused <= 390 and refused % 2 == 0
        assert metric(text, 'ctxleak_proxy_caller_share_spent_total{caller="bob"}') is None
        assert metric(text, "ctxleak_proxy_caller_share") == 0.5


def test_a_caller_over_its_share_is_refused_when_the_operator_refuses(lm, tmp_path):
    """on_exhausted refuse: past its share a caller gets 429 caller_share_spent, others 200;
    an app's end users (the caller header) each have their own share, and /metrics counts
    them under the app's key only."""
    with serving_sqlite(lm, tmp_path / "l.db", caller_keys={"key-app": "app", **KEYS},
                        caller_share=0.25, on_exhausted="refuse", caller_header="x-user",
                        budgets=Budgets(default=4.0)) as (url, ledger, _):
        assert ask(url, "key-alice").status_code == 200  # 1 reserved: her whole share
        over = ask(url, "key-alice")
        assert over.status_code == 429 and over.json()["error"]["code"] == "caller_share_spent"
        assert ask(url, "key-bob").status_code == 200
        for user in ("u1", "u2"):
            assert ask(url, "key-app", headers={"x-user": user}).status_code == 200
        assert ask(url, "key-app", headers={"x-user": "u1"}).status_code == 429
        assert ask(url, "key-app", headers={"x-user": "bad\tname"}).status_code == 400
        assert set(ledger.caller_spent("app/u1")) == {"acct-7"}
        text = httpx.get(url + "/metrics").text
        # the bad name was refused before it was counted: u1, u2, u1
        assert metric(text, 'ctxleak_proxy_caller_requests_total{caller="app"}') == 3
        assert "u1" not in text and "u2" not in text
        assert ask(url, "key-eve").status_code == 401


def test_cli_serve_reads_the_callers_before_loading(monkeypatch, tmp_path, capsys):
    """serve --caller-keys: a bad row refused naming file and line before the model loads;
    good flags reach the config and the start line."""
    import ctxleak.engine.models as models
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    calls: dict = {}
    monkeypatch.setattr(models, "load_model", lambda name, **kw: calls.setdefault("lm", kw))
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: calls.setdefault("run", kw))
    keys = tmp_path / "callers.jsonl"
    keys.write_text('{"caller": "app", "key_env": "APP_KEY_FOR_TEST"}\n{"caller": "x"}\n')
    with pytest.raises(SystemExit) as code:
        main(["serve", "--ledger", str(tmp_path / "a.db"), "--caller-keys", str(keys)])
    err = capsys.readouterr().err
    assert code.value.code != 0 and f"{keys}:1" in err and "APP_KEY_FOR_TEST" in err
    assert "lm" not in calls
    monkeypatch.setenv("APP_KEY_FOR_TEST", "s3cret-key")
    keys.write_text('{"caller": "app", "key_env": "APP_KEY_FOR_TEST"}\n')
    with pytest.raises(SystemExit) as code:
        main(["serve", "--ledger", str(tmp_path / "a.db"), "--caller-keys", str(keys),
              "--caller-share", "0.25", "--caller-rate", "30", "--caller-header", "X-User"])
    err = capsys.readouterr().err
    assert code.value.code == 0, err
    config = calls["run"]["config"]
    assert (config.caller_keys, config.caller_share, config.caller_rate,
            config.caller_header) == ({"s3cret-key": "app"}, 0.25, 30.0, "x-user")
    assert "each may spend 0.25 of a document's budget" in err and "s3cret" not in err


def test_concurrent_reservations_of_one_caller_never_pass_its_share(tmp_path):
    """8 threads on 4 connections to one SQLite file, 40 reservations of 1 by one caller,
    budget 10, share 0.5: exactly 5 granted, and its figure and the document's are 5."""
    import threading

    ledgers = [SQLiteLedger(tmp_path / "l.db") for _ in range(4)]
    granted: list[str] = []
    barrier = threading.Barrier(8)

    def run(k: int) -> None:
        barrier.wait()
        for j in range(5):
            res = ledgers[k % 4].reserve(f"r{k}-{j}", ["d"], 1.0, Budgets(default=10.0),
                                         caller="alice", share=0.5)
            granted.extend(res.granted)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 5
    assert ledgers[0].caller_spent("alice") == {"d": 5.0}
    assert ledgers[0].document("d").spent == 5.0
    for ledger in ledgers:
        ledger.close()
