"""CID through ctxleak's plugin on a server with two data-parallel engines, against a fake vLLM
API server that routes as vLLM's does (tests/helpers/fake_dp.py): without the
``X-data-parallel-rank`` header an answer's two prompts go to two engines and the answer is void;
ctxleak's client learns the number of ranks from the records, pins both prompts of every answer
to the rank its id names (the probe to rank 0), so every answer is decoded on one engine at the
first try and equals in-process CID; the client counts the answers by the rank that decoded
them, as the records say."""

from __future__ import annotations

import secrets

from helpers.cid_ledgers import cid_ledgers
from helpers.fake_dp import FakeDataParallel

from ctxleak.engine.capabilities import CID_DECODING
from ctxleak.engine.served import serve
from ctxleak.plugins.protocol import PAIRS_PATH, RANK_HEADER, pair_rank, pair_xargs
from served.test_fake_plugin import CONFIGS, NEVER, _jobs, _same


def test_answers_are_pinned_to_one_rank_and_equal_in_process_cid(tiny, tok_dir):
    jobs = _jobs(tiny, CONFIGS[0])
    with FakeDataParallel(tiny, ranks=2, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        assert CID_DECODING in lm.capabilities
        assert lm.plugin["data_parallel_size"] == 2 and server.headers_seen == ["0"]
        there = cid_ledgers(lm, jobs)
        routed = [(p, rank) for p, rank in server.routed if p is not None][1:]  # no probe
        assert len(routed) == len(jobs)  # one try per answer, its two prompts on one engine
        assert all(rank == pair_rank(p, 2) for p, rank in routed)
        assert server.headers_seen[1:] == [str(rank) for _, rank in routed]
        assert sum(lm.decoded_ranks.values()) == len(jobs)
        assert lm.decoded_ranks == {k: [r for _, r in routed].count(k)
                                    for k in {r for _, r in routed}}
    _same(cid_ledgers(tiny, jobs), there)


def test_an_answer_sent_without_the_header_is_split_and_void(tiny, tok_dir):
    """What the pinning prevents: the router sends the two prompts to two engines, each
    engine's plugin sees a stream without its partner, and the answer is void."""
    import httpx

    with FakeDataParallel(tiny, ranks=2, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        ctx, empty = lm.encode("rome is in italy . the city of"), lm.encode("the city of")
        pair = secrets.token_hex(16)
        body = {"model": lm.info.served_model, "prompt": [ctx, empty], "max_tokens": 4,
                "temperature": 0.0, "stop_token_ids": list(lm.eos_ids),
                "return_token_ids": True,
                "vllm_xargs": pair_xargs(pair=pair, context_ids=ctx, lam=0.5, temperature=0.8,
                                         seed=1, greedy=False, eps=None, min_new_tokens=0,
                                         stops=list(lm.eos_ids))}
        httpx.post(server.url + "/v1/completions", json=body, timeout=60).raise_for_status()
        assert sorted(rank for p, rank in server.routed if p == pair) == [0, 1]
        got = httpx.get(server.url + PAIRS_PATH + pair, timeout=30).json()
        assert "partner stream is missing" in got["error"]
        wrong = httpx.post(server.url + "/v1/completions", json=body,
                           headers={RANK_HEADER: "2"}, timeout=60)
        assert wrong.status_code == 400 and "out of range [0, 2)" in wrong.text
