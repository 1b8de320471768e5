"""How the proxy's ledger composes a document's answers (ctxleak.proxy.composition): basic
composition (ε adds up) or Rényi DP at one fixed order as a privacy filter, with its budget
conversion computed by hand, the order chosen from public settings, a ledger that keeps one
unit for life, and bounded CID and DP-RAG charged their Rényi divergences through the proxy."""

from __future__ import annotations

import math

import httpx
import pytest
from helpers.proxy_server import chat_body, serving_sqlite

from ctxleak.errors import ConfigError
from ctxleak.mitigations.accounting import ExponentialMechanismEvent, PureDPEvent
from ctxleak.mitigations.losses import events_rdp
from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.composition import Composition, best_order


def pure_rdp(eps: float, order: float) -> float:
    """Any ε-DP mechanism's Rényi divergence at ``order``, by hand (Bun and Steinke)."""
    a = order
    sinh = math.log((math.sinh(a * eps) - math.sinh((a - 1) * eps)) / math.sinh(eps)) / (a - 1)
    return min(sinh, a * eps * eps / 2, eps)


def test_the_budget_at_an_order_converts_back_to_its_epsilon_by_hand():
    comp = Composition("renyi", order=10.0, delta=1e-6)
    # eps − log(9/10) + (log 1e-6 + log 10) / 9
    want = 4.0 - math.log(0.9) + (math.log(1e-6) + math.log(10.0)) / 9
    assert comp.budgets(Budgets(default=4.0)).default == pytest.approx(want)
    assert comp.epsilon(want) == pytest.approx(4.0)
    assert comp.unit() == "renyi(order=10,delta=1e-06)"
    assert Composition().unit() == "epsilon" and Composition().amount(0.3, None) == 0.3
    assert comp.amount(0.3, ((PureDPEvent(0.3), 2),)) == pytest.approx(2 * pure_rdp(0.3, 10.0))
    assert comp.amount(0.3, None) == math.inf  # an (ε, δ) step has no Rényi curve
    # a budget too small for any Rényi divergence at this order holds nothing
    assert comp.budgets(Budgets(classes={"r": 0.1})).classes["r"] == 0.0
    with pytest.raises(ConfigError, match="accounting"):
        Composition("advanced")
    with pytest.raises(ConfigError, match="renyi_order"):
        Composition("renyi", order=1.0)


def test_the_order_holds_the_most_answers_and_many_small_steps_beat_adding_epsilon():
    events = ((PureDPEvent(0.05), 65),)  # bounded CID, 64 tokens and the stopping EOS
    order = best_order(events, 4.0, 1e-6)
    comp = Composition("renyi", order, 1e-6)
    per = events_rdp(events, order)
    answers = math.floor(comp.budgets(Budgets(default=4.0)).default / per)
    for other in (order - 1, order + 1):
        held = Composition("renyi", other, 1e-6).budgets(Budgets(default=4.0)).default
        assert math.floor(held / events_rdp(events, other)) <= answers
    assert answers > math.floor(4.0 / (0.05 * 65))  # basic composition: 1 answer
    assert best_order(None, 4.0, 1e-6) == 32.0


def test_a_ledger_keeps_its_unit_and_the_votes_cannot_be_composed_in_renyi(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.keep_unit("renyi(order=8,delta=1e-06)")
    ledger.keep_unit("renyi(order=8,delta=1e-06)")
    with pytest.raises(ConfigError, match="in renyi.order=8.* and this proxy would charge in "
                                          "epsilon"):
        ledger.keep_unit("epsilon")
    ledger.close()
    old = SQLiteLedger(tmp_path / "old.db")  # a ledger from before units: ε
    old.reserve("r", ["a"], 1.0, Budgets())
    with pytest.raises(ConfigError, match="in epsilon"):
        old.keep_unit("renyi(order=8,delta=1e-06)")
    old.close()
    with pytest.raises(ConfigError, match="no Rényi curve"):
        ProxyConfig(mechanism="dp-vote:eps=2,shards=3", accounting="renyi",
                    budgets=Budgets(default=10.0))
    with pytest.raises(ConfigError, match="ex-post"):
        ProxyConfig(accounting="renyi", charge_ex_post=True)


def test_bounded_cid_is_charged_its_tokens_renyi_divergence_through_the_proxy(lm, tmp_path):
    eps, tokens = 0.05, 6
    config = dict(budgets=Budgets(default=4.0), accounting="renyi", renyi_order=16.0,
                  budget_delta=1e-6)
    with serving_sqlite(lm, tmp_path / "l.db", **config) as (url, ledger, _):
        body = chat_body({"documents": [{"id": "d", "text": "the phone is one two"}],
                          "epsilon": eps}, "the phone ?", temperature=1.0, max_tokens=tokens,
                         min_tokens=tokens)
        resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        released = resp.json()["ctxleak"]["tokens"]
        # each released token (the stopping EOS included) one ε-DP step at order 16
        assert ledger.document("d").spent == pytest.approx(released * pure_rdp(eps, 16.0))
        held = Composition("renyi", 16.0, 1e-6).budgets(Budgets(default=4.0)).default
        assert held == ledger.document("d").budget
        # a budget of 4 ε holds this many such answers, against ⌊4 / (0.05 · 7)⌋ = 11 adding ε
        assert math.floor(held / (7 * pure_rdp(eps, 16.0))) > 11
        # the operator's documents API says the unit and the ε the divergence guarantees
        row = httpx.get(url + "/v1/ctxleak/documents/d", timeout=30).json()
        spent = ledger.document("d").spent
        assert row["unit"] == "renyi(order=16,delta=1e-06)" and row["renyi_spent"] == spent
        by_hand = spent + math.log(15 / 16) - (math.log(1e-6) + math.log(16)) / 15
        assert row["epsilon_spent"] == pytest.approx(max(by_hand, 0.0))
        assert row["budget"] == pytest.approx(4.0)


def test_dp_rag_over_a_datastore_charges_each_document_its_own_divergence(lm, tmp_path):
    from ctxleak.mitigations.datastore import Datastore
    from ctxleak.mitigations.dp_rag import DPRAG
    from ctxleak.mitigations.mechanisms import Decoding

    store = Datastore.of([(f"d{k}", t) for k, t in enumerate([
        "the capital of italy is rome", "rome is in italy", "paris is in france",
        "the river of rome is the tiber", "bread and milk"])])
    mech = DPRAG(eps=2, eps_retrieval=0.2, top_k=1)
    order = 8.0
    with serving_sqlite(lm, tmp_path / "l.db", mechanism=mech, datastore=store,
                        budgets=Budgets(default=20.0), accounting="renyi", renyi_order=order,
                        max_tokens=4) as (url, ledger, _):
        resp = httpx.post(url + "/v1/chat/completions", timeout=60,
                          json=chat_body(None, "capital of italy ?", temperature=1.0,
                                         max_tokens=4))
        assert resp.status_code == 200, resp.text
        decoding = Decoding(temperature=1.0, max_new_tokens=4, min_new_tokens=0)
        retrieval = pure_rdp(0.2, order)
        steps = 4 * pure_rdp(mech.token_eps(decoding), order)
        spent = {i: ledger.document(i).spent for i, _ in store.documents}
        kept = [i for i, v in spent.items() if v > retrieval * 1.5]
        for doc_id, value in spent.items():
            want = retrieval + (steps if doc_id in kept else 0.0)
            assert value == pytest.approx(want, rel=1e-9)
        assert ExponentialMechanismEvent(0.2).rdp([order])[0] == pytest.approx(retrieval)
