"""Context Influence Decoding through ctxleak's vLLM plugin, against a fake vLLM whose engine
runs the plugin's own pair book on a tiny model (tests/helpers/fake_plugin.py), in the fast
tier: the plugin is found when ctxleak connects; its answers equal in-process CID (tokens, and
per token log p̄_λ, log p(y|∅), λ_t and the ex-post ε); a pair broken on purpose (a partner
late or dropped, lengths made unequal, a lying record) is caught and tried again, never
returned; a pair that keeps failing decodes by the whole-distribution route and says so; a
server whose flags would break pairs is refused, naming the flag."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
from helpers.cid_ledgers import cid_ledgers
from helpers.fake_plugin import FakePluginVLLM
from helpers.fake_server import fake_vllm

from ctxleak.engine.capabilities import CID_DECODING
from ctxleak.engine.served import serve
from ctxleak.errors import ConfigError, CtxleakWarning
from ctxleak.mitigations.cid import CIDConfig

NEVER = (0, 1, 3)  # the tiny tokenizer's <pad>, <bos> and <unk>: never sampled
PAIRS = [("rome is in italy . the city of", "the city of"),
         ("the capital of france is paris . the capital of", "the capital of"),
         ("paris . yes the news report said", "the news report said")]


def _jobs(tiny, config, seeds=(11, 12, 13)):
    return [(tiny.encode(ctx), tiny.encode(q), config, seed)
            for (ctx, q), seed in zip(PAIRS, seeds)]


def _same(here, there, tol=1e-5):
    """The ledgers agree: tokens, EOS, and every float of every entry."""
    assert len(here) == len(there)
    for a, b in zip(here, there):
        assert a.response_ids == b.response_ids and a.stopped_on_eos == b.stopped_on_eos
        for e, f in zip(a.entries, b.entries, strict=True):
            assert e.token_id == f.token_id and e.step == f.step
            assert abs(e.logp_context - f.logp_context) < tol
            assert abs(e.logp_empty - f.logp_empty) < tol
            assert abs(e.lam - f.lam) < 1e-6
            assert (e.eps_ex_post is None) == (f.eps_ex_post is None)
            if e.eps_ex_post is not None:
                assert abs(e.eps_ex_post - f.eps_ex_post) < tol


def _whole_distribution_requests(server):
    """Requests for every token's log-prob (``logprobs`` of the vocabulary's size or -1)."""
    return sum(1 for path, body in server.requests
               if path == "/v1/completions" and body and body.get("logprobs") not in (None, 0))


CONFIGS = [CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=8, min_new_tokens=2),
           CIDConfig(lam=0.7, temperature=1.0, max_new_tokens=6, min_new_tokens=0,
                     bounded_eps=2.0)]


def test_deployed_plain_cid_records_its_ex_post_epsilon_through_the_plugin(tiny, tok_dir):
    """As the privacy proxy answers, plain CID's ledger keeps each step's ex-post ε and no ε:
    through the plugin the floats of in-process CID; the tokens and ex-post figures of bounded
    CID at a bound that never binds (λ_t = λ, App. B, Alg. 1); a plugin of protocol 2, which
    does not take the request, is not sent it: the answers decode by ctxleak's own loop, said."""
    config = CONFIGS[0]
    jobs = _jobs(tiny, config)
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            there = cid_ledgers(lm, jobs, deployed=True)
        assert _whole_distribution_requests(server) == 0
    here = cid_ledgers(tiny, jobs, deployed=True)
    _same(here, there)
    loose = [(f, e, (replace(config[0], bounded_eps=1e6), config[1]), s) for f, e, _, s in jobs]
    for plain, bounded in zip(here, cid_ledgers(tiny, loose)):
        assert plain.response_ids == bounded.response_ids and plain.bounded_eps is None
        assert all(e.eps is None and e.eps_ex_post > 0 for e in plain.entries)
        assert [e.eps_ex_post for e in plain.entries] == [e.eps_ex_post for e in bounded.entries]
        assert plain.token_eps_ex_post == bounded.token_eps_ex_post
        assert plain.composed_eps_ex_post == bounded.composed_eps_ex_post
        assert plain.composed_eps is None and plain.eps_fields() == {}
    undeployed = cid_ledgers(tiny, jobs)
    assert all(e.eps_ex_post is None for r in undeployed for e in r.entries)
    assert all(r.token_eps_ex_post is None and r.composed_eps_ex_post is None for r in undeployed)
    with FakePluginVLLM(tiny, never=NEVER, flags={"protocol": 2}) as old:
        lm = serve("tiny", old.url, tokenizer=tok_dir)
        with pytest.warns(CtxleakWarning, match="protocol 3"):
            again = cid_ledgers(lm, jobs, deployed=True)
        assert old.pair_requests == 1  # the probe alone
    _same(here, again)


def test_the_plugin_is_found_when_ctxleak_connects(tiny, tok_dir):
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        assert CID_DECODING in lm.capabilities and lm.plugin["plugin"] == "ctxleak-cid"
    with fake_vllm(tiny, never=NEVER) as plain:
        lm = serve("tiny", plain.url, tokenizer=tok_dir)
        assert CID_DECODING not in lm.capabilities and lm.plugin is None


@pytest.mark.parametrize("config", CONFIGS, ids=["lambda", "bounded"])
def test_answers_through_the_plugin_equal_in_process_cid(tiny, tok_dir, config):
    jobs = _jobs(tiny, config)
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the plugin route says nothing
            there = cid_ledgers(lm, jobs)
        assert _whole_distribution_requests(server) == 0
        assert server.pair_requests == 1 + len(jobs)  # the probe, then one per answer
    _same(cid_ledgers(tiny, jobs), there)
    assert all(len(r.entries) >= 2 for r in there)


@pytest.mark.parametrize("fault", ["late", "drop", "short", "lie"])
def test_a_broken_pair_is_caught_and_tried_again(tiny, tok_dir, fault):
    """The first answer's pair is broken; it is voided (or its records refused) and decoded
    again with a new pair id, so the answers still equal in-process CID."""
    jobs = _jobs(tiny, CONFIGS[0])[:1]
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        server.faults.extend([fault])
        there = cid_ledgers(lm, jobs)
        assert server.pair_requests == 1 + 2  # the probe, the broken try, the retry
        assert not server.records  # every record read once, the void one too
    _same(cid_ledgers(tiny, jobs), there)


def test_a_step_run_twice_gets_the_same_token_and_one_draw(tiny, tok_dir):
    jobs = _jobs(tiny, CONFIGS[0])[:1]
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        server.faults.extend(["repeat"])
        there = cid_ledgers(lm, jobs)
        assert server.pair_requests == 2
    _same(cid_ledgers(tiny, jobs), there)


def test_a_pair_that_keeps_failing_decodes_the_other_way_and_says_so(tiny, tok_dir):
    jobs = _jobs(tiny, CONFIGS[0])[:1]
    with FakePluginVLLM(tiny, never=NEVER) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        server.faults.extend(["late"] * 3)
        with pytest.warns(UserWarning, match="fell out of step.*3 times.*partner stream is "
                                             "missing.*whole next-token distributions"):
            there = cid_ledgers(lm, jobs)
        assert _whole_distribution_requests(server) > 0
    _same(cid_ledgers(tiny, jobs), there)


@pytest.mark.parametrize("flags, flag", [({"chunked_prefill": True}, "--no-enable-chunked"),
                                         ({"pairing_scheduler": False}, "--scheduler-cls")])
def test_a_server_whose_flags_break_pairs_is_refused_naming_the_flag(tiny, tok_dir, flags,
                                                                       flag):
    with FakePluginVLLM(tiny, never=NEVER, flags=flags) as server:
        with pytest.raises(ConfigError, match=flag):
            serve("tiny", server.url, tokenizer=tok_dir)


def test_prompts_over_the_step_budget_are_refused_naming_the_flag(tiny, tok_dir):
    with FakePluginVLLM(tiny, never=NEVER, flags={"max_num_batched_tokens": 8}) as server:
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        with pytest.raises(ConfigError, match="--max-num-batched-tokens"):
            cid_ledgers(lm, _jobs(tiny, CONFIGS[0])[:1])
