"""The canary audit of a deployed ``ctxleak serve --datastore`` across two neighbouring
datastores, as its claim's relation has it ("Auditing Differentially Private Machine Learning:
How Private is Private SGD?"): one proxy over a datastore holding a document that states a
canary, one over the same datastore without it, each as deployed (its noise a server secret:
no client seed is sent, and one would be refused). Every trial asks the canary question of one
of them; the attacker counts the canary's digits in the answer. The ε lower bound of that test
is not above the claim for DP-RAG ("RAG with Differential Privacy", Grislain) and the DP votes
("Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy", Koga, Wu and
Chaudhuri), and it is above it for DP-RAG with its noisy step broken (the audit has the power
to see a leak through the proxy). Adding or removing one document is one step of the
"document" relation: the guarantee is the claim itself.

The model copies the digits of its prompt (:mod:`helpers.digit_copier`): the only way a
canary reaches an answer is through the document that states it."""

from __future__ import annotations

import httpx
import pytest
from helpers.broken_dp import NoNoiseDPRAG
from helpers.digit_copier import digit_copier
from helpers.proxy_server import serving_sqlite

from ctxleak.methods.attacks.canary import CANARY_QUERY, CANARY_SENTENCE, attack_score
from ctxleak.methods.attacks.lower_bound import eps_lower_bound
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import Decoding

TRIALS, TOKENS, THRESHOLD, EPS, CANARY = 24, 4, 2, 0.05, "472"
DECODING = Decoding(temperature=0.8, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
BASE = [("customer", "Customer file ."), ("billing", "Billing record ."),
        ("customer-account", "Customer record of the account ."),
        ("billing-account", "Billing file of the account ."), ("both", "Customer Billing record .")]
WITH = Datastore.of([*BASE, ("canary", CANARY_SENTENCE.format(canary=CANARY))])
WITHOUT = Datastore.of(BASE)
SPARSE = {"eps": EPS, "shards": 3, "eps_token": EPS / 40, "eps_svt": EPS / 40}
HONEST = {"dp-rag": DPRAG(eps=EPS), "dp-vote": DPVote(eps=EPS, shards=3),
          "dp-sparse-vote": DPSparseVote(**SPARSE)}


@pytest.fixture(scope="module")
def lm():
    return digit_copier()


def _hits(lm, path, mechanism, store) -> int:
    """How many of TRIALS answers of the proxy over ``store``, asked the canary question with
    no seed, repeat at least THRESHOLD of the canary's digits."""
    hits = 0
    with serving_sqlite(lm, path, mechanism=mechanism, datastore=store) as (url, _, _):
        for _ in range(TRIALS):
            resp = httpx.post(url + "/v1/chat/completions", timeout=60, json={
                "model": "tiny", "messages": [{"role": "user", "content": CANARY_QUERY}],
                "temperature": 0.8, "max_tokens": TOKENS, "min_tokens": TOKENS})
            assert resp.status_code == 200, resp.text
            text = resp.json()["choices"][0]["message"]["content"]
            hits += attack_score(text, CANARY) >= THRESHOLD
    return hits


def _audit(lm, tmp_path, mechanism) -> tuple[float, dict]:
    claim = mechanism.claim(DECODING)
    tp = _hits(lm, tmp_path / "with.db", mechanism, WITH)
    fp = _hits(lm, tmp_path / "without.db", mechanism, WITHOUT)
    return claim.eps, eps_lower_bound(tp, TRIALS, fp, TRIALS, 0.95, claim.delta)


@pytest.mark.parametrize("name", list(HONEST))
def test_each_deployed_datastore_proxy_stays_within_its_claim(lm, tmp_path, name):
    claim, bound = _audit(lm, tmp_path, HONEST[name])
    print(f"{name} over neighbouring datastores: lower bound {bound['eps_lower']:.3g} "
          f"(TP {bound['tp']}/{TRIALS}, FP {bound['fp']}/{TRIALS}) against its claim "
          f"ε = {claim:.3g} per response (document)")
    assert bound["eps_lower"] <= claim


def test_the_audit_sees_a_broken_dp_rag_through_the_proxy(lm, tmp_path):
    claim, bound = _audit(lm, tmp_path, NoNoiseDPRAG(eps=EPS))
    print(f"broken dp-rag over neighbouring datastores: lower bound {bound['eps_lower']:.3g} "
          f"(TP {bound['tp']}/{TRIALS}, FP {bound['fp']}/{TRIALS}) against ε = {claim:.3g}")
    assert bound["eps_lower"] > claim
