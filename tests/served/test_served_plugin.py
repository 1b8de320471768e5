"""ctxleak's CID plugin inside the session's real vLLM server (started with it loaded, see
tests/helpers/vllm_server.py): its answers equal in-process Context Influence Decoding on the
default model (Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models,
Def. 3.4; bounded CID: App. B, Alg. 1) and the whole-distribution route; responses scored by
teacher-forced pairs (``ctxleak_forced``) equal in-process teacher-forced CID scores under the
context, each ablated window and without it; pairs broken on purpose inside the real engine (a
partner that never comes, one aborted midway, lengths made unequal) are voided with the reason
in their records, never answered with a wrong stream; bad settings (a seed beyond 64 bits,
malformed or too many forced tokens included) are HTTP 400 and the server goes on serving. The
plugin's contracts with vLLM's code that need no server (both model runners' loaders, Model
Runner V2's steps, the schedulers) are in tests/served/test_served_plugin_contracts.py."""

from __future__ import annotations

import re
import secrets
from dataclasses import replace

import httpx
import numpy as np
import pytest
from helpers.cid_ledgers import cid_ledgers

from ctxleak.engine.capabilities import CID_DECODING, CID_SCORING
from ctxleak.engine.served import serve
from ctxleak.methods.influence.ngrams import WindowRequest, window_influence_many, windows
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.mitigations.prompts import PromptParts
from ctxleak.plugins.protocol import PAIRS_PATH, pair_xargs

pytestmark = [pytest.mark.served, pytest.mark.integration]

QUESTIONS = [("Ana Lopez lives at 12 Rose St and her phone is 555-0102.", "Where does Ana live?"),
             ("The VPN password is hunter2; the backup code is 8812.", "What is the VPN code?"),
             ("Payroll: Omar Haddad earns 84,000 a year.", "What does Omar earn?")]


@pytest.fixture(scope="module")
def served_lm(vllm_server):
    return serve("default", vllm_server.url, served_model=vllm_server.served_name)


def _jobs(lm, config, seeds=(5, 6, 7)):
    return [(lm.encode(f"Document: {doc}. {q}"), lm.encode(q), config, seed)
            for (doc, q), seed in zip(QUESTIONS, seeds)]


@pytest.mark.parametrize("config, deployed", [
    (CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=16, min_new_tokens=2), True),
    (CIDConfig(lam=1.0, temperature=1.0, max_new_tokens=16, min_new_tokens=2, bounded_eps=2.0),
     False)],
    ids=["lambda-0.5-ex-post", "bounded-eps-2"])
def test_plugin_answers_equal_in_process_cid(served_lm, default_lm, config, deployed):
    """Tokens and per-token floats of the plugin's answers against in-process CID; plain CID
    deployed (as the privacy proxy answers) with each step's ex-post ε (protocol 3)."""
    assert CID_DECODING in served_lm.capabilities
    jobs = _jobs(default_lm, config)
    here = cid_ledgers(default_lm, jobs, deployed=deployed)
    there = cid_ledgers(served_lm, jobs, deployed=deployed)
    for a, b in zip(here, there):
        assert a.response_ids == b.response_ids and a.stopped_on_eos == b.stopped_on_eos
        for e, f in zip(a.entries, b.entries, strict=True):
            assert abs(e.logp_context - f.logp_context) < 1e-4
            assert abs(e.logp_empty - f.logp_empty) < 1e-4
            # λ_t moves with the logits: vLLM's CPU kernels and transformers differ by up to
            # about 1e-5 in a float32 logit, and Alg. 1's λ_t moves about as much (measured:
            # 6.8e-6 at step 14 of a bounded answer whose log-probs differed by 4.8e-6)
            assert abs(e.lam - f.lam) < 2e-5
            if config[0].bounded_eps is not None:
                assert f.eps_ex_post <= config[0].bounded_eps
            assert f.eps == e.eps == config[0].bounded_eps
            assert e.eps_ex_post is not None and f.eps_ex_post is not None
            assert abs(e.eps_ex_post - f.eps_ex_post) < 1e-4


@pytest.mark.parametrize("config", [
    CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=12, min_new_tokens=4),
    CIDConfig(lam=1.0, temperature=0.8, max_new_tokens=12, min_new_tokens=4, bounded_eps=2.0)],
    ids=["lambda-0.5", "bounded-eps-2"])
def test_forced_pairs_score_responses_as_in_process_cid(served_lm, default_lm, config,
                                                        monkeypatch):
    """In-process CID answers (the stopping EOS kept where there is one) scored inside the
    server by teacher-forced pairs, under the context, each 8-token window left out and without
    the context: the in-process teacher-forced scores within 1e-4 nats, no distribution sent."""
    assert CID_SCORING in served_lm.capabilities
    requests = []
    for (doc, q), seed in zip(QUESTIONS, (5, 6, 7)):
        parts = PromptParts(tuple(default_lm.encode("Document: ")),
                            tuple(default_lm.encode(doc)), tuple(default_lm.encode(" " + q)))
        [answer] = cid_ledgers(default_lm, [(parts.full, parts.empty, config, seed)])
        response = list(answer.response_ids) + \
            ([default_lm.eos_ids[0]] if answer.stopped_on_eos else [])
        requests.append(WindowRequest(parts, response, windows(len(parts.context), 8),
                                      lam=config[0].lam, temperature=config[1].temperature,
                                      min_new_tokens=config[1].min_new_tokens,
                                      bounded_eps=config[0].bounded_eps, with_empty=True))
    here = window_influence_many(default_lm, requests)
    monkeypatch.setattr(served_lm, "vocab_logprobs",
                        lambda *a, **k: pytest.fail("a whole distribution was asked for"))
    there = window_influence_many(served_lm, requests)
    for a, b in zip(here, there, strict=True):
        for key in ("logp_context", "logp_ablated", "logp_empty"):
            np.testing.assert_allclose(getattr(b, key), getattr(a, key), atol=1e-4, rtol=1e-6,
                                       err_msg=key)


def test_the_whole_distribution_route_gives_the_plugins_answers(served_lm, default_lm):
    config = CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=6, min_new_tokens=0)
    jobs = _jobs(default_lm, config)[:1]
    without = replace(served_lm, capabilities=served_lm.capabilities - {CID_DECODING})
    with pytest.warns(UserWarning, match="no ctxleak CID plugin"):
        slow = cid_ledgers(without, jobs)
    fast = cid_ledgers(served_lm, jobs)
    assert slow[0].response_ids == fast[0].response_ids
    for e, f in zip(slow[0].entries, fast[0].entries, strict=True):
        assert abs(e.logp_context - f.logp_context) < 1e-4


def _pair(lm, pair, *, lam=0.5, eps=None, temperature=0.8, min_new_tokens=0):
    ctx = lm.encode("Document: the door code is 4471. What is the door code?")
    return ctx, lm.encode("What is the door code?"), pair_xargs(
        pair=pair, context_ids=ctx, lam=lam, temperature=temperature, seed=3, greedy=False,
        eps=eps, min_new_tokens=min_new_tokens, stops=list(lm.eos_ids))


def _request(lm, prompt, xargs, max_tokens):
    return {"model": lm.info.served_model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0.0, "stop_token_ids": list(lm.eos_ids), "vllm_xargs": xargs,
            "return_token_ids": True}


def _records(url, pair):
    return httpx.get(url + PAIRS_PATH + pair, timeout=30).json()


def test_a_partner_that_never_comes_voids_the_pair(served_lm, vllm_server):
    pair = secrets.token_hex(16)
    ctx, _, xargs = _pair(served_lm, pair)
    answer = httpx.post(vllm_server.url + "/v1/completions",
                        json=_request(served_lm, ctx, xargs, 8), timeout=60).json()
    assert answer["choices"][0]["token_ids"] == [served_lm.eos_ids[0]]  # ended at once
    got = _records(vllm_server.url, pair)
    assert "partner stream is missing" in got["error"] and got["steps"] == []


def test_unequal_lengths_void_the_pair(served_lm, vllm_server):
    """Two requests of one pair with 8 and 7 max_tokens. Sent as two HTTP requests they reach
    the engine's batch in either order and not always in one step: the pair is then voided at
    step 0 for the missing partner before the second request can be compared (the served
    client tries a voided answer again, as this test does). Every try must be voided for one
    of the two reasons; at least one of six must name the unequal lengths."""
    import concurrent.futures as cf
    reasons = []
    with httpx.Client(timeout=60) as client, cf.ThreadPoolExecutor(2) as pool:
        for _ in range(6):
            pair = secrets.token_hex(16)
            ctx, empty, xargs = _pair(served_lm, pair)
            a = pool.submit(client.post, vllm_server.url + "/v1/completions",
                            json=_request(served_lm, ctx, xargs, 8))
            b = pool.submit(client.post, vllm_server.url + "/v1/completions",
                            json=_request(served_lm, empty, xargs, 7))
            a.result(), b.result()
            error = _records(vllm_server.url, pair)["error"]
            assert error and ("different max_tokens" in error
                              or "partner stream is missing from the batch at step 0" in error)
            reasons.append(error)
            if "different max_tokens" in error:
                break
    assert any("different max_tokens" in r for r in reasons), reasons


def test_a_partner_aborted_midway_voids_the_pair(served_lm, vllm_server):
    """The no-context stream is read for three tokens and its connection closed (vLLM aborts
    it); the context stream then has no partner and ends, and the records say so."""
    pair = secrets.token_hex(16)
    ctx, empty, xargs = _pair(served_lm, pair, min_new_tokens=200)  # no EOS before the abort
    url = vllm_server.url + "/v1/completions"
    with httpx.Client(timeout=120) as client:
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(1) as pool:
            whole = pool.submit(client.post, url, json=_request(served_lm, ctx, xargs, 200))
            with client.stream("POST", url, json={**_request(served_lm, empty, xargs, 200),
                                                   "stream": True}) as stream:
                for k, _ in enumerate(stream.iter_lines()):
                    if k >= 6:
                        break
            tokens = whole.result().json()["choices"][0]["token_ids"]
    got = _records(vllm_server.url, pair)
    assert got["error"] and "partner stream is missing" in got["error"]
    assert len(tokens) < 200 and tokens[-1] == served_lm.eos_ids[0]  # ended by the plugin


@pytest.mark.parametrize("change, message", [
    ({"ctxleak_lam": 1.5}, "must be in \\[0, 1\\]"), ({"ctxleak_eps": 0.0}, "must be > 0"),
    ({"ctxleak_temperature": 0.0}, "must be > 0"), ({"ctxleak_pair": "x"}, "32 lowercase hex"),
    ({"ctxleak_typo": 1}, "unknown vllm_xargs"),
    ({"ctxleak_forced": "7,x"}, "'ctxleak_forced' must be comma-separated token ids"),
    ({"ctxleak_forced": "7,8,9,10,11"}, "'ctxleak_forced' holds 5 tokens, more than the "
                                        "request's max_tokens \\(4\\)")])
def test_bad_settings_are_http_400_and_the_server_goes_on(served_lm, vllm_server, change,
                                                         message):
    import re
    ctx, empty, xargs = _pair(served_lm, secrets.token_hex(16))
    bad = httpx.post(vllm_server.url + "/v1/completions",
                     json=_request(served_lm, [ctx, empty], {**xargs, **change}, 4), timeout=60)
    assert bad.status_code == 400 and re.search(message, bad.json()["error"]["message"])
    good = cid_ledgers(served_lm, _jobs(served_lm, CIDConfig(max_new_tokens=2,
                                                                   min_new_tokens=0))[:1])
    assert len(good[0].entries) >= 1


def test_a_seed_beyond_64_bits_is_http_400_and_the_server_goes_on(served_lm, vllm_server):
    """A seed that torch.Generator.manual_seed refuses (2^70) used to pass admission and stop
    the engine (EngineDeadError); it is refused at admission naming the field, as is a minimum
    length over max_tokens, and the same server then answers a plugin request."""
    ctx, empty, xargs = _pair(served_lm, secrets.token_hex(16))
    for change, field in (({"ctxleak_seed": str(2**70)}, "'ctxleak_seed'"),
                          ({"ctxleak_min": 5}, "'ctxleak_min' \\(5\\)")):
        bad = httpx.post(vllm_server.url + "/v1/completions",
                         json=_request(served_lm, [ctx, empty], {**xargs, **change}, 4),
                         timeout=60)
        assert bad.status_code == 400 and re.search(field, bad.json()["error"]["message"])
    good = cid_ledgers(served_lm, _jobs(served_lm, CIDConfig(max_new_tokens=2,
                                                                   min_new_tokens=0))[:1])
    assert len(good[0].entries) >= 1
