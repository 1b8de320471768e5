"""The served model's checks before a run, on answers the test controls (the client's ``post``
replaced): a server whose tokenizer differs is caught, log-probs that are impossible or uniform
are refused, and answers are read by token id (vLLM's prompt_logprobs, the echo form, samples).
The same checks against a real vLLM server live in the real-server tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.tiny_models import word_tokenizer

from ctxleak.engine.served import DIALECTS, PROBE_TEXT, ServedInfo
from ctxleak.engine.served_client import ClientOptions, ServedClient, ServerError
from ctxleak.errors import ConfigError

DEAD = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny models' word-level tokenizer (the checks need no real model's)."""
    return word_tokenizer(add_bos=True)


def served(tokenizer, api="vllm"):
    info = ServedInfo(name="default", served_model="m", base_url=DEAD, tokenizer="t", api=api)
    return DIALECTS[api](client=ServedClient(DEAD, options=ClientOptions(attempts=1)),
                         tokenizer=tokenizer, info=info, eos_ids=[2])


def answering(lm, logprob, tokens=None):
    """Replace the client's requests: /tokenize gives ``tokens`` (default: the local ids),
    completions give ``logprob(position, token)`` at every prompt position."""
    def post_many(path, bodies, headers=None):
        out = []
        for body in bodies:
            if path == "/tokenize":
                out.append({"tokens": lm.encode(body["prompt"]) if tokens is None else tokens})
                continue
            choices = []
            for k, seq in enumerate(body["prompt"]):
                rows = [None] + [{str(t): {"logprob": logprob(p, t), "rank": 1}}
                                 for p, t in enumerate(seq) if p > 0]
                choices.append({"index": k, "prompt_logprobs": rows, "prompt_token_ids": seq})
            out.append({"choices": choices})
        return out

    lm.client.post_many = post_many
    lm.client.post = lambda path, body, headers=None: post_many(path, [body])[0]


def test_a_plausible_server_passes(tokenizer):
    lm = served(tokenizer)
    answering(lm, lambda p, t: -2.0 - 0.1 * (p % 5))
    lm.check_server()


def test_a_different_tokenizer_is_caught(tokenizer):
    lm = served(tokenizer)
    ids = lm.encode(PROBE_TEXT)
    answering(lm, lambda p, t: -2.0 - 0.1 * (p % 5), tokens=ids[:5] + [ids[5] + 1] + ids[6:])
    with pytest.raises(ConfigError, match="first difference at token 5") as info:
        lm.check_server()
    assert info.value.param == "tokenizer"


def test_uniform_log_probs_are_refused(tokenizer):
    lm = served(tokenizer)
    uniform = -math.log(len(tokenizer))
    answering(lm, lambda p, t: uniform)
    with pytest.raises(ServerError, match="uniform"):
        lm.check_server()


def test_near_uniform_but_varying_log_probs_are_refused(tokenizer):
    lm = served(tokenizer)
    uniform = -math.log(len(tokenizer))
    answering(lm, lambda p, t: uniform + 0.3 * (p % 2))
    with pytest.raises(ServerError, match="uniform"):
        lm.check_server()


def test_positive_log_probs_are_refused(tokenizer):
    lm = served(tokenizer)
    answering(lm, lambda p, t: 0.5 if p == 3 else -2.0)
    with pytest.raises(ServerError, match="impossible"):
        lm.check_server()


def test_continuation_log_probs_are_read_by_position_and_id(tokenizer):
    lm = served(tokenizer)
    answering(lm, lambda p, t: -(p + t / 1e6))
    prompt, cont = [5, 6, 7], [8, 9, 10, 11, 12, 13]  # long: prompt_logprobs
    got = lm.continuation_logprobs([prompt], [cont])[0]
    want = [-(p + t / 1e6) for p, t in zip(range(3, 9), cont)]
    assert got.dtype == np.float64 and np.allclose(got, want, rtol=0, atol=1e-12)


def test_the_echo_form_is_read_by_token_id(tokenizer):
    lm = served(tokenizer, api="openai-echo")

    def post_many(path, bodies, headers=None):
        out = []
        for body in bodies:
            assert body["echo"] is True and body["return_tokens_as_token_ids"] is True
            choices = [{"index": k, "logprobs": {
                "tokens": [f"token_id:{t}" for t in seq] + ["token_id:1"],
                "token_logprobs": [None] + [-float(p) for p in range(1, len(seq))] + [-9.0]}}
                for k, seq in enumerate(body["prompt"])]
            out.append({"choices": choices})
        return out

    lm.client.post_many = post_many
    got = lm.continuation_logprobs([[5, 6], [7]], [[8, 9], [10]])
    assert got[0].tolist() == [-2.0, -3.0] and got[1].tolist() == [-1.0]


def test_samples_drop_the_stopping_eos(tokenizer):
    lm = served(tokenizer)
    seen = []

    def post_many(path, bodies, headers=None):
        seen.extend(bodies)
        return [{"choices": [{"index": 0, "token_ids": [4, 5, 2], "finish_reason": "stop"},
                             {"index": 1, "token_ids": [4, 5, 6], "finish_reason": "length"}]}
                for _ in bodies]

    lm.client.post_many = post_many
    out = lm.draw([[1, 2, 3]], [77], temperature=1.0, max_new_tokens=3, min_new_tokens=1,
                    n=2)
    assert out == [[([4, 5], True), ([4, 5, 6], False)]]
    body = seen[0]
    assert (body["seed"], body["n"], body["min_tokens"], body["stop_token_ids"]) == \
        (77, 2, 1, [2])
