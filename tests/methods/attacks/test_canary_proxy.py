"""The canary audit of a running ``ctxleak serve`` (``ctxleak.canary_audit_proxy``; "Auditing
Differentially Private Machine Learning: How Private is Private SGD?") against a scripted
server, no model: each trial is one request whose marked documents hold the trial's context, with
the trial's seed; a server that answers the planted canary under a small claim is caught, one
that answers digits unrelated to it holds; the guarantee is the answers' claim by group privacy,
the (ε, δ) lower bound is the one its counts give by hand, and the result saved is read back
with its δ checked."""

from __future__ import annotations

import json
import math
import random

import pytest
from helpers.fake_chat import Reply, completion, fake_chat
from helpers.run_folders import without_manifest

import ctxleak
from ctxleak.engine.generation import derive_seed
from ctxleak.errors import ConfigError, EditedRunError
from ctxleak.methods.attacks.canary import CANARY_QUERY, plant_canaries
from ctxleak.methods.attacks.canary_proxy import neighbour_guarantee
from ctxleak.methods.attacks.lower_bound import HOLDS, NO_GUARANTEE, VIOLATED, eps_lower_bound
from ctxleak.methods.influence.data import load_examples
from ctxleak.mitigations.mechanisms import Claim
from ctxleak.results import CanaryResult, load_result

DOCS = [{"id": "d0", "context": "Customer file."}, {"id": "d1", "context": "Billing record."}]
EPS, DELTA = 0.1, 1e-5
FIELD = {"mode": "mechanism", "epsilon": EPS, "delta": DELTA, "relation": "document"}


def served(answer):
    """A ctxleak serve that answers ``answer(documents)`` under the claim :data:`FIELD`."""
    def reply(body, headers):
        out = completion(answer(body["ctxleak"]["documents"]))
        return Reply(body={**out, "ctxleak": FIELD})
    return reply


def liar(documents):
    """Broken: the planted canary's digits, whatever the claim says."""
    return "".join(c for c in documents[0]["text"] if c.isdigit())


def test_neighbour_guarantee_by_hand():
    assert neighbour_guarantee(Claim(0.5, 0.0, "context"), 3) == (0.5, 0.0)
    eps, delta = neighbour_guarantee(Claim(0.2, 1e-4, "shard"), 3)
    assert eps == pytest.approx(0.6) and delta == pytest.approx(1e-4 * (1 + math.exp(0.2)
                                                                       + math.exp(0.4)))
    eps, delta = neighbour_guarantee(Claim(0.2, 1e-4, "document"), 1)
    assert eps == pytest.approx(0.4) and delta == pytest.approx(1e-4 * (1 + math.exp(0.2)))
    assert neighbour_guarantee(Claim(None), 2) == (None, 0.0)
    assert neighbour_guarantee(None, 1) == (None, 0.0)
    assert neighbour_guarantee(Claim(30.0, 0.5, "document"), 1)[1] < 1  # vacuous, still < 1


def test_the_delta_lower_bound_by_hand():
    # 9 of 10 with the target guessed planted, 1 of 10 without, at 95 %
    pure = eps_lower_bound(9, 10, 1, 10)
    (tpr_lo, _), (_, fpr_hi) = pure["tpr_ci"], pure["fpr_ci"]
    assert pure["eps_lower"] == pytest.approx(max(math.log(tpr_lo / fpr_hi),
                                                  math.log((1 - fpr_hi) / (1 - tpr_lo))))
    got = eps_lower_bound(9, 10, 1, 10, delta=0.05)
    assert got["eps_lower"] == pytest.approx(max(math.log((tpr_lo - 0.05) / fpr_hi),
                                                 math.log((1 - fpr_hi - 0.05) / (1 - tpr_lo))))
    assert 0 < got["eps_lower"] < pure["eps_lower"]
    assert eps_lower_bound(9, 10, 1, 10, delta=0.99)["eps_lower"] == 0.0
    with pytest.raises(ConfigError, match="delta"):
        eps_lower_bound(9, 10, 1, 10, delta=1.0)


def test_a_server_that_answers_the_planted_canary_is_caught(tmp_path):
    with fake_chat(served(liar)) as server:
        result = ctxleak.canary_audit_proxy(server.url, "tiny", DOCS, trials=40, seed=3,
                                            max_new_tokens=6, copies=2, seeded=True)
        bodies = sorted(server.bodies(), key=lambda b: b["seed"])
    trials = plant_canaries(load_examples(DOCS, task="summarization"), 40, 3)
    # each trial as one request: the question alone, its context twice, its own seed
    by_seed = {derive_seed(3, t.trial): t for t in trials}
    assert sorted(by_seed) == [b["seed"] for b in bodies]
    for body in bodies:
        trial = by_seed[body["seed"]]
        assert body["messages"] == [{"role": "user", "content": CANARY_QUERY}]
        assert body["ctxleak"] == {"documents": [{"id": f"trial-{trial.trial}/{k}",
                                                  "text": trial.context} for k in range(2)]}
        assert body["max_tokens"] == body["min_tokens"] == 6
    s = result.summary
    # a document replaced: removed then added, twice (two copies): 4 steps
    assert s["eps_guarantee"] == pytest.approx(4 * EPS)
    assert s["delta"] == pytest.approx(DELTA * sum(math.exp(i * EPS) for i in range(4)))
    assert s["eps_lower"] == pytest.approx(eps_lower_bound(
        s["tp"], s["n_in"], s["fp"], s["n_out"], s["confidence"], s["delta"])["eps_lower"])
    assert s["law"] == VIOLATED and s["eps_lower"] > 4 * EPS
    assert [r["score"] for r in result.records if r["included"]] == [6] * 20
    assert all(r["claim_relation"] == "document" for r in result.records)
    # saved and read back, its δ checked with its bound
    path = result.save(tmp_path / "audit")
    back = load_result(path)
    assert isinstance(back, CanaryResult) and back.summary["eps_lower"] == s["eps_lower"]
    body = json.loads((path / "results.json").read_text())
    body["summary"]["delta"] = 0.0  # a δ edited away: the bound no longer matches its counts
    (without_manifest(path) / "results.json").write_text(json.dumps(body))
    with pytest.raises(EditedRunError) as err:
        load_result(path)
    assert err.value.field == "summary.eps_lower"


def test_a_server_whose_answers_ignore_the_canary_holds():
    rng = random.Random(0)
    with fake_chat(served(lambda docs: f"{rng.randrange(10 ** 6):06d}")) as server:
        s = ctxleak.canary_audit_proxy(server.url, "tiny", DOCS, trials=40).summary
    assert s["law"] == HOLDS and s["eps_lower"] <= s["eps_guarantee"] == pytest.approx(2 * EPS)


def test_an_answer_without_a_claim_has_no_guarantee_and_bad_copies_are_refused():
    with fake_chat() as server:  # a plain endpoint: no ctxleak field
        s = ctxleak.canary_audit_proxy(server.url, "m", DOCS, trials=4).summary
        assert s["eps_guarantee"] is None and s["law"] == NO_GUARANTEE
        with pytest.raises(ConfigError, match="copies") as err:
            ctxleak.canary_audit_proxy(server.url, "m", DOCS, trials=4, copies=0)
    assert err.value.param == "copies"
