"""The black-box attacks (extraction, "The Good and The Bad: Exploring Privacy Issues in
Retrieval-Augmented Generation (RAG)"; membership, "Is My Data in Your Retrieval Database?")
run against ``ctxleak serve`` deploying each defence, through the attacks' endpoint target (the
audit's RAG app, its retrieved documents sent as the proxy's marked context) and the real
``openai`` client, on a tiny in-process model: bounded Context Influence Decoding, DPVoteRAG and
DPSparseVoteRAG (Koga, Wu and Chaudhuri, "Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy"), DP-RAG (Grislain, "RAG with Differential Privacy") and scrubbing.

For each, what the attacks read is what the proxy released: every answer equals the mechanism
asked directly on the proxy's prompt with the question's own seed; every answer carries the
claim the proxy answered under, equal to the direct answer's claim; each document's ledger
charge is the sum of the claims of the answers that read it; and the reports hold that claim:
per answer and, for the pure-ε claim over a document (bounded CID), per document beside the
lower bound, which stays under it; scrubbing is reported as claiming nothing."""

from __future__ import annotations

import re

import pytest
from helpers.proxy_server import serving_sqlite

import ctxleak
from ctxleak.methods.attacks.lower_bound import HOLDS, NO_GUARANTEE
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import RELATIONS, AnswerRequest, Decoding
from ctxleak.mitigations.prompts import template_prompt
from ctxleak.mitigations.scrubbing import Scrubbing
from ctxleak.proxy import Budgets
from ctxleak.sensitive.span import Span
from ctxleak.targets.model_answerer import question_seed

DOCS = [{"id": f"d{k}", "text": text} for k, text in enumerate([
    "the patient name is paris and the phone is one two three",
    "the doctor said the capital of italy is rome",
    "the news report said berlin is a city in germany",
    "madrid is the capital city of spain said the report",
    "the email of the doctor is in the document",
    "the summary of the news is on page one",
    "the address of the patient is four rome",
    "france is a country and paris is a city"])]
TOKENS, SEED = 6, 0
#: How the proxy decodes the attacks' questions: T = 1 (the endpoint answerer's default for
#: ctxleak serve), up to TOKENS tokens, no minimum.
DECODING = Decoding(temperature=1.0, max_new_tokens=TOKENS, min_new_tokens=0)


def _names(text: str) -> list[Span]:
    """A detector of the corpus's two names, so scrubbing changes what the model reads."""
    return [Span("PERSON", m.start(), m.end(), m.group(), 1.0)
            for m in re.finditer(r"paris|rome", text)]


MECHANISMS = {
    "bounded-cid": CID(lam=1.0, bounded_eps=0.5),
    "dp-vote": DPVote(eps=2.0, shards=3),
    "dp-sparse-vote": DPSparseVote(eps=2.0, shards=3),
    "dp-rag": DPRAG(eps=5.0),
    "scrub": Scrubbing(detect=_names),
}


def _direct(lm, mechanism, records):
    """Each record's answer as the mechanism gives it asked directly: the proxy's prompt (its
    template holding the retrieved documents in order, the question), the question's seed."""
    texts = {d["id"]: d["text"] for d in DOCS}
    requests = [AnswerRequest(documents=tuple(texts[i] for i in r["retrieved"]),
                              prompt=template_prompt(lm, r["question"], reserve=TOKENS),
                              seed=question_seed(SEED, r["question"]),
                              ids=tuple(r["retrieved"]), query=r["question"])
                for r in records]
    return mechanism.answer(lm, requests, DECODING)


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_the_attacks_read_what_the_proxy_releases_and_the_claim_it_charges(lm, tmp_path, name,
                                                                           capsys):
    mechanism = MECHANISMS[name]
    with serving_sqlite(lm, tmp_path / "ledger.db", mechanism=mechanism,
                        budgets=Budgets(default=1e6), unguaranteed="use",
                        audit_seeds=True) as (url, ledger, _):  # the attacks send seeds
        target = ctxleak.attack_target(rag_demo=True, endpoint=url + "/v1",
                                       endpoint_model="tiny", endpoint_context="ctxleak",
                                       max_new_tokens=TOKENS, top_k=3, endpoint_seeded=True)
        extract = ctxleak.attack_extract(target, DOCS, queries=4, seed=SEED, progress=False,
                                         output=str(tmp_path / "extract"))
        member = ctxleak.attack_membership(target, DOCS, held_out=0.5, attacks=["direct"],
                                           seed=SEED, progress=False,
                                           output=str(tmp_path / "membership"))
        records = [*extract.records, *member.records]
        charged = {d["id"]: ledger.document(d["id"]).spent for d in DOCS}
    assert len(records) == 4 + len(DOCS)
    # the attacks' answers are the proxy's: the mechanism's own, asked directly
    direct = _direct(lm, mechanism, records)
    assert [r["answer"] for r in records] == [lm.decode(list(a.response_ids)) for a in direct]
    # each answer says the claim it was released under: the direct answer's
    for r, a in zip(records, direct):
        assert r["claim_relation"] == a.claim.relation and r["claim_delta"] == a.claim.delta
        assert r["claim_eps"] == (None if a.claim.eps is None else pytest.approx(a.claim.eps))
    if name == "bounded-cid":  # ε per token over the released tokens (the EOS included)
        assert {r["claim_eps"] for r in records} <= {0.5 * n for n in range(1, TOKENS + 1)}
    elif name != "scrub":  # a DP mechanism's claim for the proxy's decoding, whole
        assert {r["claim_eps"] for r in records} == {mechanism.claim(DECODING).eps}
    # each document is charged the claims of the answers that read it (none for scrubbing)
    for doc, spent in charged.items():
        want = sum(r["claim_eps"] or 0.0 for r in records if doc in r["retrieved"])
        assert spent == pytest.approx(want, abs=1e-9), doc
    assert (max(charged.values()) > 0) == (name != "scrub")
    # the reports hold the claim the answers said
    claim = mechanism.claim(DECODING)
    for result in (extract, member):
        said = result.summary["claim"]
        eps = [r["claim_eps"] for r in result.records]
        assert said == {"relation": claim.relation, "covers": RELATIONS[claim.relation],
                        "eps_max": None if claim.eps is None else pytest.approx(max(eps)),
                        "delta": claim.delta, "answers": len(eps), "of": len(eps)}
    member.show(plain=True)  # the console says the claim under the table
    said = "no differential-privacy guarantee" if claim.eps is None else \
        f"δ = {claim.delta:.2g} per response, relation {claim.relation}"
    out = " ".join(capsys.readouterr().out.split())
    assert f"the answers' claim ({len(member.records)} of {len(member.records)} said it)" in out
    assert said in out
    s = member.summary
    lower = s["attacks"]["direct"]["eps"]["eps_lower"]
    if name == "bounded-cid":  # a pure ε over any context: per document over 1 question each
        assert s["eps_claimed"] == pytest.approx(max(r["claim_eps"] for r in member.records))
        assert s["eps_claimed"] <= claim.eps  # at most ε per token × max_tokens
        assert s["law"] == s["attacks"]["direct"]["eps"]["law"] == HOLDS
        assert lower <= s["eps_claimed"]
    elif name == "scrub":  # claims nothing: no law
        assert s["claim"]["eps_max"] is None and s["eps_claimed"] is None
        assert s["law"] == NO_GUARANTEE
    else:  # an (ε, δ) or a shard's claim: said, and no pure-ε law over a document from it
        assert s["eps_claimed"] is None and s["law"] == NO_GUARANTEE
        assert lower <= claim.eps
