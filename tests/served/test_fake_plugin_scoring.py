"""Responses scored under Context Influence Decoding by ctxleak's vLLM plugin (teacher-forced
pairs, ``ctxleak_forced``) against the fake vLLM whose engine runs the plugin's own pair book on
a tiny model (tests/helpers/fake_plugin.py), in the fast tier: the forced pairs give the
in-process teacher-forced scores of the same response (log p̄_λ(y_t | D), under each ablated
window, log p(y_t | ∅); plain λ, bounded ε, EOS-masked positions, a response ending on EOS)
without one whole-distribution request; what a pair cannot carry (one λ per token) and a plugin
of protocol 1 keep the whole-distribution route; bad ``ctxleak_forced`` values are HTTP 400 and
the server goes on; a served influence run (CID, n-gram windows, passages, the control) equals
the in-process run within the served fidelity tests' 1e-4."""

from __future__ import annotations

import re
import secrets
from dataclasses import replace

import httpx
import numpy as np
import pytest
from helpers.fake_plugin import FakePluginVLLM

import ctxleak
from ctxleak.engine.capabilities import CID_DECODING, CID_SCORING
from ctxleak.engine.served import serve
from ctxleak.methods.influence.ngrams import WindowRequest, window_influence_many, windows
from ctxleak.mitigations.prompts import PromptParts
from ctxleak.plugins.protocol import PAIRS_PATH, pair_xargs

NEVER = (0, 1, 3)  # the tiny tokenizer's <pad>, <bos> and <unk>: never sampled
#: nats: the same float32 weights, each position in a forward pass of another shape here and
#: there (measured: 1.9e-6 at log-probs of about -11); relative 1e-6 for an EOS scored where the
#: minimum length masks it (about -1.25e30: in-process keeps z(·|∅) in float32)
TOL, RTOL = 1e-5, 1e-6


def _parts(tiny, context, query):
    return PromptParts(tuple(tiny.encode("question :")), tuple(tiny.encode(context)),
                       tuple(tiny.encode(query)))


def _requests(tiny, **cid):
    eos = tiny.eos_ids[0]
    one = _parts(tiny, "rome is in italy . the city of rome", " the city of")
    two = _parts(tiny, "the capital of france is paris .", " the capital of")
    return [WindowRequest(one, tiny.encode("rome . yes the news"), windows(len(one.context), 3),
                          with_empty=True, **cid),
            WindowRequest(two, tiny.encode("paris is") + [eos], windows(len(two.context), 4),
                          with_empty=True, **cid)]


def _whole_distribution_requests(server):
    return sum(1 for path, body in server.requests
               if path == "/v1/completions" and body and body.get("logprobs") not in (None, 0))


def _same(here, there):
    for a, b in zip(here, there, strict=True):
        for key in ("logp_context", "logp_ablated", "logp_empty"):
            np.testing.assert_allclose(getattr(b, key), getattr(a, key), atol=TOL, rtol=RTOL,
                                       err_msg=key)


@pytest.mark.parametrize("cid", [dict(lam=0.5, temperature=0.8, min_new_tokens=3),
                                 dict(lam=1.0, temperature=1.0, min_new_tokens=2,
                                      bounded_eps=2.0),
                                 dict(lam=0.3, temperature=1.3, min_new_tokens=0)],
                         ids=["lambda-eos-masked", "bounded-eps", "no-minimum"])
def test_forced_pairs_give_the_in_process_cid_scores(tiny, tok_dir, cid):
    """Every window of both responses and the no-context row (the second response ends on an
    EOS: masked under the first setting's minimum, scored as any token under the others), to
    :data:`TOL`; one forced pair per prompt, no distribution sent."""
    requests = _requests(tiny, **cid)
    here = window_influence_many(tiny, requests)
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        assert {CID_DECODING, CID_SCORING} <= lm.capabilities
        since = server.pair_requests
        there = window_influence_many(lm, requests)
        assert _whole_distribution_requests(server) == 0
        assert server.pair_requests - since == sum(1 + len(r.spans) for r in requests)
        assert not server.records  # every record read once
    _same(here, there)
    assert np.all(np.isfinite(there[1].logp_context))  # the EOS the second response ends on


def test_what_a_pair_cannot_carry_keeps_the_whole_distribution_route(tiny, tok_dir):
    """One λ per token (a replayed bounded answer) goes by whole distributions, the other
    request of the same call through a forced pair; both equal in-process."""
    plain, per_token = _requests(tiny, temperature=0.8, min_new_tokens=1)
    per_token = WindowRequest(per_token.parts, per_token.response, per_token.spans,
                              lam=[0.2, 0.9, 0.5], temperature=0.8, min_new_tokens=1,
                              with_empty=True)
    here = window_influence_many(tiny, [plain, per_token])
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        since = server.pair_requests
        there = window_influence_many(lm, [plain, per_token])
        assert server.pair_requests - since == 1 + len(plain.spans)
        assert _whole_distribution_requests(server) > 0
    _same(here, there)


def test_a_plugin_of_protocol_1_scores_by_whole_distributions(tiny, tok_dir):
    requests = _requests(tiny, lam=0.5, temperature=0.8)[:1]
    with FakePluginVLLM(tiny, never=NEVER, flags={"protocol": 1}) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        assert CID_DECODING in lm.capabilities and CID_SCORING not in lm.capabilities
        since = server.pair_requests
        there = window_influence_many(lm, requests)
        assert server.pair_requests == since and _whole_distribution_requests(server) > 0
    _same(window_influence_many(tiny, requests), there)


def test_pairs_that_keep_failing_are_scored_the_other_way_and_said(tiny, tok_dir):
    requests = [replace(_requests(tiny, lam=0.5, temperature=0.8)[0], spans=[])]  # one pair
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        server.faults.extend(["late"] * 3)
        with pytest.warns(UserWarning, match="fell out of step.*3 times.*scored by whole "
                                             "next-token distributions instead"):
            there = window_influence_many(lm, requests)
        assert _whole_distribution_requests(server) > 0
    _same(window_influence_many(tiny, requests), there)


BAD_FORCED = [("7,x", 2, "'ctxleak_forced' must be comma-separated token ids"),
              ("7,-2", 2, "'ctxleak_forced' must be token ids in \\[0, 2\\^31\\)"),
              (f"7,{2**31}", 2, "'ctxleak_forced' must be token ids in \\[0, 2\\^31\\)"),
              ("7,EOS,8", 3, "EOS id \\('ctxleak_stops'\\) only as its last token"),
              ("7,8,9", 2, "'ctxleak_forced' holds 3 tokens, more than the request's "
                           "max_tokens \\(2\\)")]


def test_bad_forced_tokens_are_http_400_and_the_server_goes_on(tiny, tok_dir):
    eos = tiny.eos_ids[0]
    ctx, empty = tiny.encode("rome is in italy . the city of"), tiny.encode("the city of")
    xargs = pair_xargs(pair=secrets.token_hex(16), context_ids=ctx, lam=0.5, temperature=0.8,
                       seed=0, greedy=False, eps=None, min_new_tokens=0, stops=[eos])
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        for forced, max_tokens, message in BAD_FORCED:
            body = {"model": "tiny", "prompt": [ctx, empty], "max_tokens": max_tokens,
                    "temperature": 0.0, "stop_token_ids": [eos], "return_token_ids": True,
                    "vllm_xargs": {**xargs, "ctxleak_forced": forced.replace("EOS", str(eos))}}
            bad = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
            assert bad.status_code == 400, forced
            assert re.search(message, bad.json()["error"]["message"]), forced
        assert server.book.pairs == {}  # refused before the engine
        there = window_influence_many(lm, _requests(tiny, lam=0.5, temperature=0.8)[:1])
        assert there[0].logp_context.size == 5 and np.all(np.isfinite(there[0].logp_context))


def test_forced_tokens_outside_the_vocabulary_void_the_pair(tiny, tok_dir):
    eos = tiny.eos_ids[0]
    ctx, empty = tiny.encode("rome is in italy . the city of"), tiny.encode("the city of")
    pair = secrets.token_hex(16)
    xargs = pair_xargs(pair=pair, context_ids=ctx, lam=0.5, temperature=0.8, seed=0,
                       greedy=False, eps=None, min_new_tokens=0, stops=[eos],
                       forced=[7, tiny.model.config.vocab_size])
    body = {"model": "tiny", "prompt": [ctx, empty], "max_tokens": 2, "temperature": 0.0,
            "stop_token_ids": [eos], "return_token_ids": True, "vllm_xargs": xargs}
    with FakePluginVLLM(tiny, never=NEVER) as server:
        answer = httpx.post(server.url + "/v1/completions", json=body, timeout=30).json()
        assert [c["token_ids"] for c in answer["choices"]] == [[eos], [eos]]
        got = httpx.get(server.url + PAIRS_PATH + pair, timeout=30).json()
        assert "outside the vocabulary" in got["error"] and got["steps"] == []


def test_a_served_influence_run_with_the_plugin_equals_in_process(tiny, tok_dir, tmp_path):
    """λ = 0.5 at T = 0.8: the answers decoded by the plugin, then their n-gram windows,
    passages and control contexts scored by forced pairs, every number within 1e-4 of the
    in-process run (the served fidelity tests' tolerance), no distribution sent."""
    kw = dict(lambda_=0.5, temperature=0.8, seed=0, max_new_tokens=4, min_new_tokens=2,
              ngram=8, passages="sentence", progress=False, limit=2)
    here = ctxleak.influence(tiny, "demo", output=str(tmp_path / "here"), **kw)
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        there = ctxleak.influence(lm, "demo", output=str(tmp_path / "there"), **kw)
        assert _whole_distribution_requests(server) == 0
    for b, c in zip(here.records, there.records, strict=True):
        assert b["response_ids"] == c["response_ids"] and c["lambda"] == 0.5
        assert len(c["window_influence"]) >= 2
        for key in ("logp_context", "logp_empty", "token_influence", "window_influence",
                    "passage_influence", "control_influence"):
            np.testing.assert_allclose(c[key], b[key], atol=1e-4, err_msg=key)


def test_prompts_over_the_step_budget_are_scored_the_other_way_and_said(tiny, tok_dir):
    """Decoding refuses them, naming the flag; scoring a response already drawn goes by whole
    distributions instead, and says why."""
    requests = _requests(tiny, lam=0.5, temperature=0.8)[:1]
    with FakePluginVLLM(tiny, never=NEVER, flags={"max_num_batched_tokens": 8}) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        with pytest.warns(UserWarning, match="--max-num-batched-tokens.*scored by whole"):
            there = window_influence_many(lm, requests)
        assert _whole_distribution_requests(server) > 0
    _same(window_influence_many(tiny, requests), there)
