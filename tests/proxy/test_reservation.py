"""No token before its reservation, nothing overspent: the model computes no forward pass of an
answer before the answer's reservation is in the ledger (bounded CID and ex-post charging,
streamed or not); 12 concurrent clients on a budget of 8 never pass it (bounded CID) or pass it
by at most one answer (plain CID charged ex post); and a proxy killed mid-answer leaves the
reservation charged in full."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

import httpx
import openai
import pytest
from helpers.proxy_server import QUESTION, chat_body
from helpers.proxy_server import serving as proxy_serving
from helpers.tiny_models import tiny_llama

from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import SQLiteLedger

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"},
        {"id": "faq-2", "text": "the doctor said the capital of italy is rome"}]


@pytest.mark.parametrize("mode", ["bounded", "bounded-stream", "ex-post", "ex-post-reserve"])
def test_no_forward_pass_before_the_reservation_is_recorded(lm, tmp_path, mode):
    """A hook on the model sees, at every forward pass, this answer's reservation already in
    the ledger (read on its own connection), holding ε·(max_tokens + 1) (bounded, or
    ``ex_post_reserve``) or the whole remaining budget (ex-post charging)."""
    marked = {"documents": DOCS, **({"lambda": 0.5} if mode.startswith("ex-post")
                                    else {"epsilon": 0.5})}
    config: dict[str, Any] = {"budgets": Budgets(default=20.0)}
    if mode.startswith("ex-post"):
        config["charge_ex_post"] = True
    if mode == "ex-post-reserve":
        config["ex_post_reserve"] = 1.0
    want = {"bounded": 2.0, "bounded-stream": 2.0, "ex-post": 20.0, "ex-post-reserve": 4.0}[mode]
    path = tmp_path / "ledger.db"
    ledger, watcher = SQLiteLedger(path), SQLiteLedger(path)
    seen: list[set[tuple[str, float]]] = []
    hook = lm.model.base_model.register_forward_pre_hook(
        lambda *_: seen.append({(doc, amount) for _, doc, amount in watcher.open_reservations()}))
    try:
        # the answer's seed is the client's: an audit (a DP answer refuses it otherwise)
        with proxy_serving(lm, ledger, audit_seeds=True, **config) as (url, _):
            with httpx.stream("POST", url + "/v1/chat/completions", timeout=60,
                              json=chat_body(marked, max_tokens=3, seed=5,
                                             stream=mode == "bounded-stream")) as resp:
                assert resp.status_code == 200
                resp.read()
    finally:
        hook.remove()
        ledger.close()
        watcher.close()
    assert seen, "the model was never called"
    assert all(s == {("acct-7", want), ("faq-2", want)} for s in seen), seen


def concurrently(n: int, one: Any) -> list[Any]:
    results: list[Any] = [None] * n
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        barrier.wait()
        results[k] = one(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def ask(url: str, marked: dict[str, Any], seed: int) -> dict[str, Any] | str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    try:
        out = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=3,
            seed=seed, extra_body={"ctxleak": marked})
    except openai.APIStatusError as exc:
        return str(exc.body["code"])
    return dict(out.model_extra["ctxleak"])


def test_twelve_concurrent_bounded_clients_never_pass_a_budget_of_8(lm, tmp_path):
    """ε 0.5, max_tokens 3: each answer reserves 2, so at most 4 hold the document at once
    and the ledger never passes 8; it charges exactly what the responses say."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    with proxy_serving(lm, ledger, budgets=Budgets(default=8.0), max_concurrent=12,
                       audit_seeds=True) as (url, _):  # each client sends its seed
        results = concurrently(12, lambda k: ask(url, {"documents": DOCS[:1], "epsilon": 0.5},
                                                 k))
    assert all(isinstance(r, dict) for r in results), results
    # a DP answer names no per-document charge (issue 81): its epsilon_spent is acct-7's
    charged = [r["epsilon_spent"] for r in results]
    assert sum(c > 0 for c in charged) >= 4  # four reservations of 2 always fit
    assert ledger.document("acct-7").spent == pytest.approx(sum(charged))
    assert ledger.document("acct-7").spent <= 8.0 + 1e-9
    assert ledger.open_reservations() == []
    ledger.close()


@pytest.mark.parametrize("reserve", [None, 0.5])
def test_twelve_concurrent_ex_post_clients_overspend_by_at_most_one_answer(lm, tmp_path,
                                                                            reserve):
    """Plain CID charged ex post, budget 4: by default each answer holds the document's whole
    remaining budget while it decodes, so answers on it run one at a time and only the last
    can pass the budget (by its own ex-post ε); with ``ex_post_reserve`` they run side by side
    and the ledger still charges each answer's ex-post ε, as the responses say."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    budget = 4.0
    with proxy_serving(lm, ledger, budgets=Budgets(default=budget), max_concurrent=12,
                       charge_ex_post=True, ex_post_reserve=reserve) as (url, _):
        results = []
        for _ in range(3):  # rounds of 12 until the budget is spent
            results += concurrently(12, lambda k: ask(url, {"documents": DOCS[:1],
                                                            "lambda": 0.5}, k))
    assert all(isinstance(r, dict) for r in results), results
    charged = [r["charged"].get("acct-7") for r in results if "acct-7" in r["charged"]]
    assert all(r["charged"]["acct-7"] == pytest.approx(r["epsilon_ex_post"])
               for r in results if "acct-7" in r["charged"])
    spent = ledger.document("acct-7").spent
    assert spent == pytest.approx(sum(charged))
    # each round's first answer had the document, unless what was left could no longer hold
    # an answer's reservation (the whole remaining budget, or 0.5 per token of 3 + 1)
    left = budget - spent
    assert len(charged) >= 3 or (left <= 0 if reserve is None else left < reserve * 4)
    if reserve is None:
        assert spent - budget <= max(charged) + 1e-9  # at most the last answer's overrun
    assert ledger.open_reservations() == []
    ledger.close()


def _killed_proxy(path: str, said: Any) -> None:
    """The proxy on a tiny model and a SQLite ledger at ``path``, in a process of its own: puts
    its URL on ``said``, then ``"decoding"`` once the second forward pass of an answer starts,
    which never ends (the process is killed mid-answer)."""
    import torch

    torch.set_num_threads(1)  # forked: no OpenMP thread pool inherited from the parent
    lm = tiny_llama()
    calls = []

    def hold(*_):
        calls.append(1)
        if len(calls) == 2:
            said.put("decoding")
            threading.Event().wait()

    lm.model.base_model.register_forward_pre_hook(hold)
    with proxy_serving(lm, SQLiteLedger(path), budgets=Budgets(default=10.0)) as (url, _):
        said.put(url)
        threading.Event().wait()


def _next_said(said: Any, child: Any, seconds: float) -> str:
    """What the child puts on ``said`` next, or why nothing came in ``seconds``."""
    import queue
    import time

    deadline = time.monotonic() + seconds
    while child.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            return said.get(timeout=0.5)
    return f"nothing from the child (exit code {child.exitcode})"


def test_a_killed_proxy_leaves_the_reservation_charged(tmp_path):
    """kill -9 of the proxy while it decodes (the reservation recorded, settle never run):
    both documents stay charged ε·(max_tokens + 1), the reservation open, and the next
    reservation sees it. The proxy's process is forked from this one (no interpreter to start,
    no torch to import again)."""
    import multiprocessing

    path = tmp_path / "killed.db"
    fork = multiprocessing.get_context("fork")
    said = fork.Queue()
    child = fork.Process(target=_killed_proxy, args=(str(path), said), daemon=True)
    child.start()
    try:
        url = _next_said(said, child, 120)
        assert url.startswith("http://"), url

        def send() -> None:  # the proxy dies before it answers
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(url + "/v1/chat/completions", timeout=60, json=chat_body(
                    {"documents": DOCS, "epsilon": 0.5}, max_tokens=7, stream=True))

        threading.Thread(target=send, daemon=True).start()
        assert said.get(timeout=60) == "decoding"
    finally:
        child.kill()
        child.join(10)
    assert child.exitcode == -signal.SIGKILL
    ledger = SQLiteLedger(path)
    assert ledger.document("acct-7").spent == 4.0 and ledger.document("faq-2").spent == 4.0
    assert sorted((doc, amount) for _, doc, amount in ledger.open_reservations()) == [
        ("acct-7", 4.0), ("faq-2", 4.0)]
    budgets = Budgets(default=10.0)
    assert ledger.reserve("next", ["acct-7"], 6.5, budgets).exhausted == ("acct-7",)
    assert ledger.reserve("next", ["acct-7"], 6.0, budgets).granted == ("acct-7",)
    ledger.close()
