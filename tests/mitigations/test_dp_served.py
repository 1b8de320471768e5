"""The DP mechanisms on a served model (a fake vLLM server backed by a tiny model,
tests/helpers/fake_server.py): one request per stream and step gives the same votes, draws and
records as in-process decoding of the same weights, from the same seeds."""

from __future__ import annotations

import pytest
from helpers.fake_server import fake_vllm, plausible
from helpers.tiny_models import tiny_llama

from ctxleak.engine.served import PROBE_TEXT, serve
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding

SPECIAL = (0, 1, 3)  # never sampled: a sampled answer's text encodes back to its ids
DOCS = ("rome is in italy . the city of rome", "paris is in france",
        "the capital of germany is berlin")


@pytest.fixture(scope="module")
def tiny():
    return plausible(tiny_llama(seed=3, vocab_extra=0), PROBE_TEXT)


@pytest.fixture(scope="module")
def served(tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("served-tok")
    tiny.tokenizer.save_pretrained(path)
    with fake_vllm(tiny, never=SPECIAL) as server:
        yield serve("tiny", server.url, tokenizer=str(path))


@pytest.mark.parametrize("mech", [
    DPVote(eps=4000, shards=3, eps_token=1000), DPSparseVote(eps=6, shards=3, threshold=1.0),
    DPRAG(eps=4, eps_retrieval=0.5)], ids=lambda m: m.name)
def test_a_served_model_decodes_what_in_process_decodes(served, tiny, mech):
    def prompt(texts):
        return tiny.encode(f"{' '.join(texts)} the city of")

    reqs = [AnswerRequest(documents=DOCS, prompt=prompt, seed=s, scores=(0.9, 0.4, 0.2))
            for s in (5, 6)]
    dec = Decoding(max_new_tokens=6, min_new_tokens=2)
    for here, there in zip(mech.answer(tiny, reqs, dec), mech.answer(served, reqs, dec)):
        assert here.response_ids == there.response_ids
        assert here.tokens_paid == there.tokens_paid and here.claim == there.claim
        assert here.documents_used == there.documents_used
        for a, b in zip(here.steps, there.steps):
            assert a["token_id"] == b["token_id"] and a["paid"] == b["paid"]
            assert b["logp_empty"] == pytest.approx(a["logp_empty"], abs=1e-4)
