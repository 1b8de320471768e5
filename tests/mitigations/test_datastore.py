"""The datastore as the DP mechanisms' input: disjoint shards by id, each voter retrieving from
its own shard, DP-RAG's private retrieval over every document, and claims over the datastore."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ctxleak.errors import ConfigError, InputError
from ctxleak.mitigations.datastore import Datastore, relevance, word_similarity
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.run.datastore_file import read_datastore

CITIES = ("paris", "rome", "berlin", "madrid", "lisbon", "vienna", "athens", "dublin", "oslo",
          "prague", "warsaw", "sofia")
STORE = Datastore(tuple((f"doc-{i}", f"{city} is a capital city number {i}")
                        for i, city in enumerate(CITIES)))


def _request(lm, store=STORE, query="which city is the capital ?", seed=0):
    def prompt(texts):
        return lm.encode(f"{' '.join(texts)} question : {query} answer :".strip())

    return AnswerRequest(documents=(), prompt=prompt, seed=seed, query=query, datastore=store)


def test_a_document_sits_in_one_shard_chosen_by_its_id_alone():
    grown = Datastore((*STORE.documents, ("new-doc", "a new document about paris")))
    before, after = STORE.shards(4), grown.shards(4)
    assert sorted(d for part in before for d in part) == sorted(STORE.documents)
    changed = [s for s in range(4) if before[s] != after[s]]
    assert changed == [Datastore.shard_of("new-doc", 4)]
    assert after[changed[0]] == (*before[changed[0]], ("new-doc", "a new document about paris"))


def test_each_voter_ranks_its_own_shard_alone():
    """Adding a document changes the retrieval of its own shard and of no other; each shard is
    ranked by the content-word cosine of the question and each document, computed by hand."""
    grown = Datastore((*STORE.documents, ("new-doc", "paris paris capital")))
    query = "paris capital"
    before, after = STORE.shard_search(query, 4, 2), grown.shard_search(query, 4, 2)
    home = Datastore.shard_of("new-doc", 4)
    for s, (a, b) in enumerate(zip(before, after)):
        part = STORE.shards(4)[s]
        assert {h.id for h in a} <= {i for i, _ in part}
        if s != home:
            assert a == b
    assert after[home][0].id == "new-doc"
    ranked = sorted(((-relevance(query, t), n, i) for n, (i, t) in
                     enumerate(STORE.shards(4)[home])))[:2]
    assert [(h.id, h.score) for h in before[home]] == [(i, -neg) for neg, _, i in ranked]
    # by hand: "paris capital" against "paris paris capital": (2 + 1) / sqrt(2 * 5)
    assert relevance(query, "paris paris capital") == pytest.approx(3 / math.sqrt(10))
    assert relevance("what is the capital", "the capital of it") == pytest.approx(1.0)


def test_a_document_no_voter_reads_changes_no_voters_documents():
    """Removing any document outside its shard's best k leaves every voter's documents as they
    were (what makes its individual charge 0); removing one inside changes its shard only."""
    query, k = "paris capital france", 1
    before = STORE.shard_search(query, 3, k)
    read = {h.id for shard in before for h in shard}
    for doc_id, _ in STORE.documents:
        smaller = Datastore(tuple(d for d in STORE.documents if d[0] != doc_id))
        after = smaller.shard_search(query, 3, k)
        changed = [s for s in range(3) if [h.id for h in before[s]] != [h.id for h in after[s]]]
        assert changed == ([Datastore.shard_of(doc_id, 3)] if doc_id in read else [])


def test_pairs_and_files(tmp_path):
    assert len(Datastore.of([("a", "x"), ("a", "x"), ("b", "y")])) == 2
    with pytest.raises(ConfigError, match="'a' has two different texts"):
        Datastore.of([("a", "x"), ("a", "z")])
    with pytest.raises(ConfigError, match="appears twice"):
        Datastore((("a", "x"), ("a", "x")))
    path = tmp_path / "store.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "x"}) + "\n\n" + json.dumps({"id": "b"}) + "\n")
    with pytest.raises(InputError, match=r"store.jsonl:3, field 'text': missing field"):
        read_datastore(path)
    path.write_text('{"id": "a", "text": "x"}\n{oops\n')
    with pytest.raises(InputError, match=r"store.jsonl:2: not valid JSON"):
        read_datastore(path)


def test_word_similarity_reads_only_the_two_texts():
    assert word_similarity("Where is Rome?", "rome is in italy .") == pytest.approx(2 / 12 ** 0.5)
    assert STORE.similarities("paris capital") == [word_similarity("paris capital", t)
                                                   for _, t in STORE.documents]


def _first_logits(lm, ids):
    with torch.no_grad():
        return lm.model(torch.tensor([ids])).logits[0, -1].double()


def test_a_vote_over_the_datastore_reads_each_voters_shard(tiny_lm):
    """Each voter's prompt holds its shard's best document for the question; the claim is over
    the datastore's documents; the first vote's counts are the voters' own argmaxes."""
    req = _request(tiny_lm)
    mech = DPVote(eps=2000, shards=4, eps_token=1000, delta=1e-6)
    answer = mech.answer(tiny_lm, [req], Decoding(max_new_tokens=1, min_new_tokens=1))[0]
    hits = STORE.shard_search(req.query, 4, 1)
    assert answer.datastore_used == tuple(h.id for shard in hits for h in shard)
    assert answer.claim.relation == "document" and answer.documents_used == ()
    votes = [int(torch.argmax(_first_logits(tiny_lm, req.prompt([h.text for h in shard]))))
             for shard in hits]
    counts = torch.bincount(torch.tensor(votes), minlength=tiny_lm.vocab_size)
    assert answer.steps[0]["top_votes"] == int(counts.max())
    # over the request's own list instead, the claim is per shard of that list
    listed = AnswerRequest(documents=tuple(t for _, t in STORE.documents[:4]),
                           prompt=req.prompt, seed=0)
    assert mech.answer(tiny_lm, [listed], Decoding(max_new_tokens=1, min_new_tokens=1)
                       )[0].claim.relation == "shard"


def test_per_voter_documents_and_key(tiny_lm):
    mech = DPSparseVote(eps=6, shards=3, per_voter=2)
    assert mech.key().endswith(",per_voter=2)")
    answer = mech.answer(tiny_lm, [_request(tiny_lm)], Decoding(max_new_tokens=2,
                                                               min_new_tokens=2))[0]
    hits = STORE.shard_search("which city is the capital ?", 3, 2)
    assert answer.datastore_used == tuple(h.id for shard in hits for h in shard)
    assert [len(shard) for shard in hits] == [min(2, len(p)) for p in STORE.shards(3)]
    with pytest.raises(ConfigError, match="per_voter"):
        DPVote(eps=1, shards=3, per_voter=0)
    with pytest.raises(ConfigError, match="shards: 20 shards"):
        DPVote(eps=1, shards=20).answer(tiny_lm, [_request(tiny_lm)], Decoding())
    with pytest.raises(ConfigError, match="query"):
        DPVote(eps=1, shards=3).answer(tiny_lm, [_request(tiny_lm, query=" ")], Decoding())


def test_dp_rag_retrieves_privately_over_every_document(tiny_lm):
    """The used documents are those whose word similarity reaches the drawn threshold, taken
    over the whole datastore; the claim is per document of the datastore."""
    query = "is paris or rome a capital city ?"
    mech = DPRAG(eps=5, top_k=2)
    answer = mech.answer(tiny_lm, [_request(tiny_lm, query=query, seed=3)],
                         Decoding(max_new_tokens=3, min_new_tokens=3))[0]
    tau = answer.steps[0]["threshold"]
    expected = tuple(doc_id for (doc_id, text) in STORE.documents
                     if word_similarity(query, text) >= tau)
    assert answer.datastore_used == expected
    assert answer.steps[0]["documents"] == len(expected)
    assert answer.claim.relation == "document" and math.isfinite(answer.claim.eps or math.nan)
    # the public thresholds span word similarity's range over a datastore, 0 to 0.6
    grid = torch.linspace(0.0, 0.6, 32, dtype=torch.float64).tolist()
    assert min(abs(tau - g) for g in grid) < 1e-12
    assert DPRAG(eps=5).key() == "dp-rag(eps=5,delta=0.001)"
    assert DPRAG(eps=5, score_range="0:1").key() == "dp-rag(eps=5,delta=0.001,score_range=0:1)"
    with pytest.raises(ConfigError, match="eps_retrieval: 0 would read every document"):
        DPRAG(eps=5, eps_retrieval=0).answer(tiny_lm, [_request(tiny_lm)], Decoding())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_individual_charges_are_what_the_answer_reads(tiny_lm, seed):
    """Each mechanism's individual charges, recomputed by hand: the votes charge the claim to
    each document a voter reads and nothing to the others; DP-RAG charges every document its
    threshold's ε and the documents the threshold drawn from the same seed keeps the whole
    claim; and the answer decoded from that seed reads exactly the documents charged more."""
    from ctxleak.mitigations.dp_retrieval import private_retrieval, threshold_grid
    from ctxleak.mitigations.dp_vote import noise_generator

    decoding = Decoding(max_new_tokens=2, min_new_tokens=0)
    query = "paris capital city"
    req = _request(tiny_lm, query=query, seed=seed)
    vote = DPVote(eps=2, shards=3)
    charges = vote.document_charges(req, decoding)
    read = {h.id for shard in STORE.shard_search(query, 3, 1) for h in shard}
    assert {d: loss.eps for d, loss in charges.items()} == dict.fromkeys(read, 2.0)
    assert all(loss.events is None for loss in charges.values())  # (ε, δ) votes
    assert set(vote.answer(tiny_lm, [req], decoding)[0].datastore_used) == read
    rag = DPRAG(eps=4, eps_retrieval=0.4, top_k=2)
    scores = [word_similarity(query, t) for _, t in STORE.documents]
    _, kept = private_retrieval(scores, threshold_grid(0.0, 0.6, 32), 2, 0.4,
                                noise_generator(seed, 2, 0))
    claim = rag.claim(decoding).eps
    want = {i: (claim if n in kept else 0.4) for n, (i, _) in enumerate(STORE.documents)}
    got = rag.document_charges(req, decoding)
    assert {d: loss.eps for d, loss in got.items()} == pytest.approx(want)
    # in Rényi DP: the threshold's exponential mechanism, and the kept ones every step too
    order, eps_t = 8.0, rag.token_eps(decoding)
    em = [(math.log(math.sinh(a * e) - math.sinh((a - 1) * e)) - math.log(math.sinh(e))) / (a - 1)
          for a, e in [(order, 0.4), (order, eps_t)]]
    em = [min(v, order * e * e / 2) for v, e in zip(em, (0.4, eps_t))]
    for n, (doc_id, _) in enumerate(STORE.documents):
        want_rdp = em[0] + (2 * em[1] if n in kept else 0.0)
        assert got[doc_id].rdp(order) == pytest.approx(want_rdp, rel=1e-9)
    used = rag.answer(tiny_lm, [req], decoding)[0].datastore_used
    assert set(used) == {STORE.documents[n][0] for n in kept}
    assert vote.document_charges(AnswerRequest(documents=("a", "b", "c"), prompt=req.prompt),
                                 decoding) is None
