"""Every served route checks every answer as it arrives, against the fake server
(tests/helpers/fake_server.py) turned bad after good answers: uniform log-probs, log-probs all
shifted 3 nats up (each still below 0 where the token was unlikely) and NaN are one
:class:`ServerError` naming the server, on the prompt-log-prob route, the candidate route (one
value per request: short continuations and candidate tokens) and the whole-distribution route.
An influence run whose server turns bad writes nothing from the bad answers, and the
EOS-renormalised log-probs of the answers road are checked before a row is written."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.fake_server import FakeVLLM, Fault

import ctxleak
from ctxleak.engine.served import serve
from ctxleak.engine.served_client import ClientOptions, ServerError
from ctxleak.methods.influence.answers import eos_masked

NEVER = (0, 1, 3)  # the tiny tokenizer's <pad>, <bos> and <unk>: never sampled


def _served_after(tiny, tok_dir, fault):
    """A checked served model on a fake whose fault starts after the check's requests."""
    bad = FakeVLLM(tiny, never=NEVER).start()
    lm = serve("tiny", bad.url, tokenizer=tok_dir,
               options=ClientOptions(attempts=1, backoff_s=0.01))
    fault.after += bad.completion_requests
    bad.fault = fault
    return bad, lm


ROUTES = {
    # one token: one allowed_token_ids request, one value per request
    "short continuation": lambda lm: lm.continuation_logprobs([[1, 5, 6, 7]], [[8]]),
    "candidate": lambda lm: lm.next_token_logprobs([[1, 5, 6, 7]], token_ids=[8]),
    "whole distribution": lambda lm: lm.vocab_logprobs([[1, 5, 6, 7]]),
    "prompt log-probs": lambda lm: lm.continuation_logprobs([[1, 5, 6, 7]],
                                                            [[8, 9, 10, 11, 12, 13]]),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("mode, says", [("uniform", "uniform distribution"),
                                         ("shifted", "impossible log-probs"),
                                         ("nan", "impossible log-probs")])
def test_every_route_refuses_a_bad_answer_after_good_ones(tiny, tok_dir, route, mode, says):
    bad, lm = _served_after(tiny, tok_dir, Fault(mode, after=1))
    try:
        ROUTES[route](lm)  # a good answer first
        with pytest.raises(ServerError, match=says) as err:
            ROUTES[route](lm)
    finally:
        bad.stop()
    assert bad.url in str(err.value)


def test_a_run_whose_server_turns_bad_writes_nothing_from_it(tiny, tok_dir, tmp_path):
    """An influence run (served, the answers road) against a server that answers shifted
    log-probs once the checks are done: a ServerError, and no row in the run folder."""
    bad, lm = _served_after(tiny, tok_dir, Fault("shifted"))
    out = tmp_path / "run"
    try:
        with pytest.raises(ServerError, match="impossible log-probs"):
            ctxleak.influence(lm, "demo", limit=2, temperature=1.0, max_new_tokens=4,
                              min_new_tokens=2, seed=0, output=str(out), progress=False)
    finally:
        bad.stop()
    samples = out / "samples.jsonl"
    assert not samples.is_file() or not samples.read_text().strip()


def test_eos_renormalised_log_probs_are_checked(tiny, tok_dir):
    """The EOS mass and the token's log-prob come from two requests; a server whose EOS mass and
    token probability sum above 1 would give a renormalised log-prob above 0, which a resume
    refuses as edited: it is refused here, before any row is written."""
    good = FakeVLLM(tiny, never=NEVER).start()
    try:
        lm = serve("tiny", good.url, tokenizer=tok_dir)
        prompts, conts = [[1, 5, 6, 7]], [[8, 9, 10]]
        fine = eos_masked(lm, prompts, conts, 2)
        assert all(np.all(r <= 0) for r in fine)
        eos = lm.eos_ids[0]
        real = lm.candidate_logprobs

        def lying(ps, ids):  # EOS said to hold all of the probability
            out = real(ps, ids)
            out[:, [k for k, t in enumerate(ids) if t == eos]] = 0.0
            return out

        lm.candidate_logprobs = lying
        with pytest.raises(ServerError, match="EOS") as err:
            eos_masked(lm, prompts, conts, 2)
    finally:
        good.stop()
    assert good.url in str(err.value)


@pytest.mark.parametrize("ids", [["a", 2], [1.5], [-1], "12", [True]])
def test_sampled_ids_that_are_not_token_ids_are_refused(tiny, tok_dir, ids):
    good = FakeVLLM(tiny, never=NEVER).start()
    try:
        lm = serve("tiny", good.url, tokenizer=tok_dir)
        lm.client.post_many = lambda path, bodies: [
            {"choices": [{"index": 0, "token_ids": ids, "finish_reason": "length"}]}
            for _ in bodies]
        with pytest.raises(ServerError, match="not a list of integers"):
            lm.draw([[1, 5, 6]], [0], temperature=1.0, max_new_tokens=2)
    finally:
        good.stop()


def test_a_distribution_with_tokens_of_probability_0_is_accepted(tiny, tok_dir):
    """-inf is a possible log-prob in a whole distribution (a token the model rules out): kept,
    while NaN and +inf are refused."""
    good = FakeVLLM(tiny, never=NEVER).start()
    try:
        lm = serve("tiny", good.url, tokenizer=tok_dir)
        v = lm.vocab_size
        top = {f"token_id:{t}": (-np.inf if t < 3 else -np.log(v - 3)) for t in range(v)}
        answer = {"choices": [{"index": 0, "logprobs": {"top_logprobs": [top]}}]}
        lm.client.post_many = lambda path, bodies: [answer for _ in bodies]
        got = lm.vocab_logprobs([[1, 5]])
        assert np.all(np.isneginf(got[0, :3])) and np.isclose(np.exp(got[0]).sum(), 1.0)
        top["token_id:0"] = np.inf
        with pytest.raises(ServerError, match="impossible"):
            lm.vocab_logprobs([[1, 5]])
    finally:
        good.stop()
