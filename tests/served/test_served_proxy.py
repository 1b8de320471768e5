"""The privacy proxy with the real ``openai`` client in front of the session's real vLLM server,
decoding CID through it (every token's log-prob at each step), its budget in a real PostgreSQL
server shared by two proxy replicas: a request without marked context answered by vLLM
unchanged, a bounded-CID answer with its ledger, the budget running out and surviving a
replica's restart, and two concurrent clients of two replicas that never overspend."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest
from helpers.cid_ledgers import cid_ledger
from helpers.proxy_server import postgres, postgres_tools, serving

from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples, prompt_parts
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.proxy import Budgets
from ctxleak.proxy.budget import open_ledger

pytestmark = pytest.mark.served

DOCS = [{"id": "acct-7", "text": "Account 7 belongs to Ana Lopez; her phone is 555-0102."}]
QUESTION = "What is the phone number of the account holder?"
EPS, MAX_TOKENS = 0.5, 1  # served CID: one request of ~0.7 s per step and stream on this CPU
RESERVATION = EPS * (MAX_TOKENS + 1)


def ask(url: str, docs: list[dict[str, str]] | None, seed: int = 0) -> Any:
    extra = {"extra_body": {"ctxleak": {"documents": docs, "epsilon": EPS}}} if docs else {}
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) \
        .chat.completions.create(model="smollm2-135m", max_tokens=MAX_TOKENS, seed=seed,
                                 temperature=0 if docs is None else 1.0,
                                 messages=[{"role": "user", "content": QUESTION}], **extra)


def test_proxy_before_vllm_with_a_postgres_ledger(default_lm, vllm_server):
    why = postgres_tools()
    if why:
        pytest.skip(f"no PostgreSQL server: {why}")
    # one answer's reservation fits each document's budget, not a second one
    budgets = Budgets(default=RESERVATION + EPS / 2)
    with postgres() as url:
        first_ledger, second_ledger = open_ledger(url), open_ledger(url)
        # the test repeats CID.answer's draws under one seed: an audit's proxy
        config = {"upstream": vllm_server.url, "budgets": budgets, "audit_seeds": True}
        lm = serve("default", vllm_server.url, served_model=vllm_server.served_name)
        with serving(lm, first_ledger, **config) as (one, _):
            # no marked context: vLLM's own answer, unchanged
            direct = httpx.post(vllm_server.url + "/v1/chat/completions", timeout=60, json={
                "model": "smollm2-135m", "max_tokens": MAX_TOKENS, "seed": 0,
                "temperature": 0, "messages": [{"role": "user", "content": QUESTION}]}).json()
            plain = ask(one, None)
            assert plain.choices[0].message.content == \
                direct["choices"][0]["message"]["content"]
            # a bounded-CID answer through vLLM: the tokens CID.answer draws on the prompts
            # of ctxleak influence with the same seed, its ε charged in PostgreSQL
            info = ask(one, DOCS, seed=5).model_extra["ctxleak"]
            example = load_examples([{"query": QUESTION, "documents": DOCS}])[0]
            parts = prompt_parts(lm, example, reserve=MAX_TOKENS)[0]
            want = cid_ledger(lm, parts.full, parts.empty,
                                CIDConfig(temperature=1.0, max_new_tokens=MAX_TOKENS,
                                          min_new_tokens=0, bounded_eps=EPS), seed=5)
            assert info["token_ids"] == [e.token_id for e in want.entries]
            assert info["epsilon_spent"] == pytest.approx(EPS * len(want.entries))
            assert info["documents"] == ["acct-7"] and info["dropped"] == []
            spent = info["epsilon_spent"]
            assert second_ledger.document("acct-7").spent == pytest.approx(spent)
        # a restarted replica reads the same ledger: acct-7 cannot cover another answer
        with serving(lm, second_ledger, **config) as (two, _):
            again = ask(two, DOCS, seed=5).model_extra["ctxleak"]
            assert again["dropped"] == ["acct-7"] and again["documents"] == []
            assert second_ledger.document("acct-7").spent == pytest.approx(spent)
            # two clients of two replicas race for a fresh document: one of them gets it
            fresh = [{"id": "acct-8", "text": DOCS[0]["text"].replace("7", "8")}]
            with serving(lm, first_ledger, **config) as (one, _):
                results: list[Any] = []
                barrier = threading.Barrier(2)

                def client(url: str, seed: int) -> None:
                    barrier.wait()
                    results.append(ask(url, fresh, seed=seed).model_extra["ctxleak"])

                threads = [threading.Thread(target=client, args=(u, k))
                           for k, u in enumerate((one, two))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
        used = [r for r in results if r["documents"] == ["acct-8"]]
        assert len(results) == 2 and len(used) == 1
        assert [r["dropped"] for r in results if r not in used] == [["acct-8"]]
        assert first_ledger.document("acct-8").spent == pytest.approx(used[0]["epsilon_spent"])
        assert first_ledger.open_reservations() == []
        first_ledger.close()
        second_ledger.close()
