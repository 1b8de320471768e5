"""Every answer a served model reads is checked, on answers the test writes (the client's
requests replaced, no server): a prompt's log-probs that are not its tokens', a candidate the
server did not keep to, a next-token distribution that is not one, choices of the wrong shape,
samples without token ids, beams cut at EOS, and the CID plugin's records (voided, out of step,
impossible). Each is one error naming the server and what is wrong; a good answer is read as
computed by hand. The same answers from a fake server on a tiny model: tests/served."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.tiny_models import word_tokenizer

from ctxleak.engine.capabilities import CID_DECODING, MissingCapability
from ctxleak.engine.pairs import PairJob
from ctxleak.engine.served import DIALECTS, ServedInfo, cid_plugin
from ctxleak.engine.served.cid_plugin import PairFailed, read_answer
from ctxleak.engine.served_client import ClientOptions, ServedClient, ServerError
from ctxleak.plugins.protocol import RANK_HEADER, UNKNOWN_PAIR, pair_rank

URL = "http://127.0.0.1:9"
WHERE = f"the server at {URL}"
EOS = 2


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(add_bos=True)


def served(tokenizer, answer, api="vllm"):
    """A served model whose every request ``answer(path, body)`` answers (or raises)."""
    info = ServedInfo(name="tiny", served_model="m", base_url=URL, tokenizer="t", api=api)
    lm = DIALECTS[api](client=ServedClient(URL, options=ClientOptions(attempts=1)),
                       tokenizer=tokenizer, info=info, eos_ids=[EOS])
    lm.sent = []

    def post_many(path, bodies, headers=None):
        lm.sent.extend((path, body) for body in bodies)
        return [answer(path, body) for body in bodies]

    def get_each(paths):
        out = []
        for path in paths:
            try:
                out.append(answer(path, None))
            except ServerError as exc:
                out.append(exc)
        return out

    lm.client.post_many = post_many
    lm.client.post = lambda path, body, headers=None: post_many(path, [body])[0]
    lm.client.get_each = get_each
    return lm


def logp(p, t):
    """The log-prob every test server gives token ``t`` at position ``p``."""
    return -0.5 - 0.01 * p - t / 1000


def prompt_logprobs(body, **change):
    """vLLM's answer to a scoring request (prompt_logprobs), with ``change`` in each choice."""
    choices = []
    for k, seq in enumerate(body["prompt"]):
        rows = [None] + [{str(t): {"logprob": logp(p, t), "rank": 1}}
                         for p, t in enumerate(seq) if p > 0]
        choices.append({"index": k, "prompt_logprobs": rows, "prompt_token_ids": seq, **change})
    return {"choices": choices}


# ---- scoring: prompt_logprobs and the echo form ----------------------------------------------
def test_prompt_log_probs_are_read_by_position_and_id(tokenizer):
    lm = served(tokenizer, lambda path, body: prompt_logprobs(body))
    got = lm.sequence_logprobs([[1, 5, 6, 7], [1, 9]], [2, 1])
    assert got[0].tolist() == [logp(2, 6), logp(3, 7)] and got[1].tolist() == [logp(1, 9)]
    assert lm.sequence_logprobs([[1, 5]], [2])[0].size == 0  # nothing to score: no request
    assert len(lm.sent) == 1


@pytest.mark.parametrize("starts", [[0], [4]])
def test_a_scored_position_outside_the_sequence_is_refused(tokenizer, starts):
    lm = served(tokenizer, lambda path, body: prompt_logprobs(body))
    with pytest.raises(ValueError, match=rf"sequence 0: scored positions from {starts[0]} in "
                                         r"a sequence of 3 \(need at least one prompt token\)"):
        lm.sequence_logprobs([[1, 5, 6]], starts)
    assert lm.sent == []


@pytest.mark.parametrize("change, says", [
    ({"prompt_logprobs": None}, "returned no prompt log-probs: not a vLLM server"),
    ({"prompt_logprobs": [None, {}]}, "returned no prompt log-probs: not a vLLM server"),
    ({"prompt_token_ids": [1, 5, 7]}, "scored other token ids than it was sent"),
    ({"prompt_logprobs": [None, {"5": -1.0}, {"8": -1.0}]},
     "prompt log-probs at position 2 lack token 6"),
])
def test_prompt_log_probs_that_are_not_the_prompts_are_refused(tokenizer, change, says):
    lm = served(tokenizer, lambda path, body: prompt_logprobs(body, **change))
    with pytest.raises(ServerError, match=says):
        lm.sequence_logprobs([[1, 5, 6]], [1])


@pytest.mark.parametrize("logprobs, says", [
    ({}, "did not echo the prompt's log-probs"),
    ({"tokens": ["token_id:1"], "token_logprobs": [None]}, "did not echo the prompt's"),
    ({"tokens": ["token_id:1", "token_id:5", "token_id:7"], "token_logprobs": [None, -1, -2]},
     r"echoed other tokens than it was sent \(return_tokens_as_token_ids\)"),
])
def test_an_echo_that_is_not_the_prompt_is_refused(tokenizer, logprobs, says):
    lm = served(tokenizer, lambda path, body: {"choices": [{"index": 0, "logprobs": logprobs}]},
                api="openai-echo")
    with pytest.raises(ServerError, match=says):
        lm.sequence_logprobs([[1, 5, 6]], [1])


# ---- candidates: allowed_token_ids -----------------------------------------------------------
def allowed(body, token=None, tops=True):
    """vLLM's answer to a request restricted to one allowed token: the raw log-prob of it."""
    [c] = body["allowed_token_ids"]
    t = c if token is None else token
    return {"choices": [{"index": k, "logprobs": {
        "tokens": [f"token_id:{t}"], "token_logprobs": [logp(len(seq), t)],
        "top_logprobs": [{"token_id:3": -1.5, f"token_id:{t}": logp(len(seq), t)}] if tops
        else None}} for k, seq in enumerate(body["prompt"])]}


def test_candidates_are_the_allowed_tokens_raw_log_probs(tokenizer):
    lm = served(tokenizer, lambda path, body: allowed(body))
    got = lm.candidate_logprobs([[1, 5], [1, 5, 6]], [7, 8])
    assert got.tolist() == [[logp(2, 7), logp(2, 8)], [logp(3, 7), logp(3, 8)]]
    assert sorted(body["allowed_token_ids"][0] for _, body in lm.sent) == [7, 8]


def test_a_candidate_the_server_did_not_keep_to_is_refused(tokenizer):
    lm = served(tokenizer, lambda path, body: allowed(body, token=4))
    with pytest.raises(ServerError, match=rf"{WHERE} did not keep to the allowed token 7 "):
        lm.candidate_logprobs([[1, 5]], [7])


def test_a_candidate_without_the_most_likely_tokens_is_refused(tokenizer):
    lm = served(tokenizer, lambda path, body: allowed(body, tops=False))
    with pytest.raises(ServerError, match=r"no log-probs of the most likely tokens for "
                                          r"candidate token 7 \('top_logprobs'\)"):
        lm.candidate_logprobs([[1, 5]], [7])


# ---- the whole next-token distribution -------------------------------------------------------
def distribution(top):
    return lambda path, body: {"choices": [{"index": 0, "logprobs": {"top_logprobs": [top]}}]}


def test_a_distribution_over_ids_beyond_the_tokenizer_is_widened(tokenizer):
    """A model's vocabulary may be larger than its tokenizer's (padding rows): the columns
    grow to the largest id answered, the tokens not answered at probability 0."""
    v = len(tokenizer)
    lm = served(tokenizer, distribution({"token_id:0": math.log(0.25), "token_id:4":
                                         math.log(0.25), f"token_id:{v + 2}": math.log(0.5)}))
    [row] = lm.vocab_logprobs([[1, 5]])
    assert row.shape == (v + 3,)
    assert row[0] == row[4] == math.log(0.25) and row[v + 2] == math.log(0.5)
    assert np.isneginf(np.delete(row, [0, 4, v + 2])).all()
    assert lm.sent[0][1]["logprobs"] == v


@pytest.mark.parametrize("top, says", [
    ([-1.0, -2.0], r"answered no next-token log-probs \('logprobs.top_logprobs': list\)"),
    ({"token_id:-3": math.log(0.5), "token_id:4": math.log(0.5)},
     r"answered a negative token id \(-3\) in a next-token distribution"),
    ({"token_id:3": math.log(0.3), "token_id:4": math.log(0.3)},
     r"returned 2 next-token log-probs covering 0.6000 of the probability: start vLLM with "
     "--max-logprobs -1"),
    ({"token_id:3": math.log(0.7), "token_id:4": math.log(0.7)},
     r"the probabilities of 2 distinct tokens sum to 1.4 > 1: refused"),
    ({"token_id:3": "much", "token_id:4": -1.0}, "that are not numbers by token id"),
])
def test_a_distribution_that_is_not_one_is_refused(tokenizer, top, says):
    lm = served(tokenizer, distribution(top))
    with pytest.raises(ServerError, match=says):
        lm.vocab_logprobs([[1, 5]])


@pytest.mark.parametrize("status, says", [(400, "start vLLM with --max-logprobs -1"),
                                          (500, "answered HTTP 500: overloaded")])
def test_a_refused_distribution_says_the_flag_only_for_a_refusal(tokenizer, status, says):
    def answer(path, body):
        raise ServerError(f"{WHERE} (/v1/completions) answered HTTP {status}: overloaded",
                          status=status)

    lm = served(tokenizer, answer)
    with pytest.raises(ServerError, match=says) as error:
        lm.vocab_logprobs([[1, 5]])
    assert error.value.status == status
    assert ("max-logprobs" in str(error.value)) == (status == 400)


# ---- samples, beams and the shape of every answer --------------------------------------------
@pytest.mark.parametrize("answer, says", [
    ([], "answered a JSON list to a completions request, where an object with 'choices'"),
    ({"choices": {"0": {}}},
     r"answered a completions request without a list of choice objects \('choices'\)"),
    ({"choices": [{"index": 0, "token_ids": [4]}]}, "answered 1 choices for 2 prompts"),
    ({"choices": [{"index": 0, "token_ids": [4]}, {"index": 2, "token_ids": [4]}]},
     "answered a choice whose 'index' is 2, not an integer from 0 to 1"),
    ({"choices": [{"index": True, "token_ids": [4]}, {"index": 0, "token_ids": [4]}]},
     "answered a choice whose 'index' is True"),
    ({"choices": [{"index": 1, "token_ids": [4]}, {"index": 1, "token_ids": [4]}]},
     "answered the same choice 'index' twice"),
    ({"choices": [{"index": 0}, {"index": 1, "token_ids": [4]}]},
     "returned no token ids of its samples"),
    ({"choices": [{"index": 0, "token_ids": [4]},
                  {"index": 1, "logprobs": {"tokens": ["token_id:4", "token_id:x"]}}]},
     "answered sampled token ids that are not a list of integers >= 0"),
])
def test_an_answer_of_the_wrong_shape_is_one_error_naming_the_field(tokenizer, answer, says):
    lm = served(tokenizer, lambda path, body: answer)
    with pytest.raises(ServerError, match=f"{WHERE} {says}"):
        lm.draw([[1, 5]], [0], temperature=1.0, max_new_tokens=2, n=2)


def test_choices_are_read_in_index_order_and_ids_from_the_tokens(tokenizer):
    lm = served(tokenizer, lambda path, body: {"choices": [
        {"index": 1, "logprobs": {"tokens": ["token_id:6", "token_id:2"]}},
        {"index": 0, "token_ids": [4, 5], "finish_reason": "length"}]})
    assert lm.draw([[1, 5]], [0], temperature=1.0, max_new_tokens=2, n=2) == \
        [[([4, 5], False), ([6], True)]]


def test_beam_search_keeps_the_best_beam_up_to_its_eos(tokenizer):
    lm = served(tokenizer, lambda path, body: {"choices": [
        {"index": k, "token_ids": ids, "finish_reason": "stop"}
        for k, ids in enumerate([[4, EOS, 5], [6, 7, 8], [9]][:body["n"]])]})
    assert lm.beam_search([[1, 5], [1, 6]], max_new_tokens=3, num_beams=3) == [[4], [4]]
    body = lm.sent[0][1]
    assert (body["use_beam_search"], body["n"], body["temperature"], body["max_tokens"]) == \
        (True, 3, 0.0, 3)
    greedy = served(tokenizer, lambda path, body: {"choices": [
        {"index": 0, "token_ids": [7, EOS], "finish_reason": "stop"}]})
    assert greedy.beam_search([[1, 5]], max_new_tokens=3, num_beams=1) == [[7]]
    body = greedy.sent[0][1]  # one beam: a greedy sample
    assert (body["temperature"], body["n"], "use_beam_search" in body) == (0.0, 1, False)


# ---- the check before a run: /tokenize -------------------------------------------------------
@pytest.mark.parametrize("status", [404, 500])
def test_a_server_without_tokenize_is_checked_by_log_probs_alone(tokenizer, status):
    """No /tokenize (404: not vLLM) leaves the log-prob checks; any other failure stops."""
    def answer(path, body):
        if path == "/tokenize":
            raise ServerError(f"{WHERE} (/tokenize) answered HTTP {status}", status=status)
        if path == "/v1/completions" and "vllm_xargs" in body:  # the plugin's probe
            return {"choices": [{"index": 0, "token_ids": [4]}, {"index": 1, "token_ids": [4]}]}
        if path.startswith("/v1/ctxleak/pairs/"):
            raise ServerError(f"{WHERE} ({path}) answered HTTP 404", status=404)
        return prompt_logprobs(body)

    lm = served(tokenizer, answer)
    if status == 404:
        lm.check_server()
        assert lm.plugin is None and CID_DECODING not in lm.capabilities
        assert [p for p, _ in lm.sent][:2] == ["/tokenize", "/v1/completions"]
    else:
        with pytest.raises(ServerError, match="HTTP 500") as error:
            lm.check_server()
        assert error.value.status == 500 and [p for p, _ in lm.sent] == ["/tokenize"]


def test_cid_decoding_without_the_plugin_is_refused_before_any_request(tokenizer):
    lm = served(tokenizer, lambda path, body: pytest.fail("nothing is sent"))
    job = PairJob((1, 5), (1,), lam=0.5, temperature=1.0, eps=None, max_new_tokens=2,
                  min_new_tokens=0, seed=0)
    with pytest.raises(MissingCapability, match="only with ctxleak's vLLM plugin loaded"):
        lm.decode_pairs([job])


# ---- the CID plugin's records ----------------------------------------------------------------
JOB = PairJob((1, 5, 6), (1,), lam=0.5, temperature=1.0, eps=None, max_new_tokens=3,
              min_new_tokens=0, seed=0)


def record(tokens=(4, 5, 6), stopped=False, **change):
    steps = [{"step": k, "token": t, "lam": 0.5, "logp_mix": -1.0 - k, "logp_empty": -2.0}
             for k, t in enumerate(tokens)]
    for k, fields in change.items():
        steps[int(k[1:])].update(fields)
    return {"steps": steps, "stopped": stopped, "server": {"plugin": "ctxleak-cid"}}


def streams(tokens=(4, 5, 6), other=None):
    return {"choices": [{"index": 0, "token_ids": list(tokens)},
                        {"index": 1, "token_ids": list(tokens if other is None else other)}]}


def test_an_answers_records_are_read_step_by_step(tokenizer):
    lm = served(tokenizer, None)
    got = read_answer(lm, JOB, streams(), record())
    assert got.token_ids == (4, 5, 6) and not got.stopped_on_eos
    assert [(s.step, s.token_id, s.lam, s.logp_context, s.logp_empty) for s in got.steps] == \
        [(0, 4, 0.5, -1.0, -2.0), (1, 5, 0.5, -2.0, -2.0), (2, 6, 0.5, -3.0, -2.0)]
    ended = read_answer(lm, JOB, streams((4, EOS)), record((4, EOS), stopped=True))
    assert ended.token_ids == (4,) and ended.stopped_on_eos and len(ended.steps) == 2


@pytest.mark.parametrize("answer, got, says", [
    (streams(), ServerError(f"HTTP 404: {UNKNOWN_PAIR}", status=404), "kept no records"),
    (streams(), {"steps": "none"}, "answered records without a list of 'steps'"),
    (streams(), [], "answered records without a list of 'steps'"),
    (streams(), {**record(), "error": "its requests fell apart"},
     "the plugin voided the answer: its requests fell apart"),
    (streams(other=(4, 5, 7)), record(), "a stream whose tokens are not the plugin's"),
    (streams((4, EOS, 6)), record((4, EOS, 6)), "ended an answer after 3 tokens"),
    (streams((4, 5)), record((4, 5)), "ended an answer after 2 tokens, against the limit of 3"),
    (streams((4, EOS)), record((4, EOS)), "ended an answer after 2 tokens"),  # "stopped" false
    (streams(), record(s1={"lam": None}), "a record of step 1 without its fields"),
    (streams(), record(s2={"token": "x"}), "a record of step 2 without its fields"),
    (streams(), record(s1={"step": 5}), "an impossible record at step 1"),
    (streams(), record(s0={"lam": 0.7}), r"an impossible record at step 0 \(λ_t 0.7"),
    (streams(), record(s2={"logp_empty": 0.1}), "an impossible record at step 2"),
])
def test_records_that_cannot_be_the_answers_fail_the_pair(tokenizer, answer, got, says):
    lm = served(tokenizer, None)
    with pytest.raises(PairFailed, match=says):
        read_answer(lm, JOB, answer, got)


def test_forced_tokens_must_be_the_answers(tokenizer):
    lm = served(tokenizer, None)
    forced = PairJob((1, 5, 6), (1,), lam=0.5, temperature=1.0, eps=None, max_new_tokens=3,
                     min_new_tokens=0, seed=0, forced=(4, 5, 7))
    with pytest.raises(PairFailed, match="answered 3 tokens that are not the 3 forced ones"):
        read_answer(lm, forced, streams(), record())


def test_bounded_cid_records_need_their_ex_post_epsilon_within_epsilon(tokenizer):
    lm = served(tokenizer, None)
    bounded = PairJob((1, 5, 6), (1,), lam=0.5, temperature=1.0, eps=1.0, max_new_tokens=3,
                      min_new_tokens=0, seed=0)
    good = record(s0={"lam": 0.2, "eps_ex_post": 0.9}, s1={"lam": 0.0, "eps_ex_post": 0.0},
                  s2={"lam": 0.5, "eps_ex_post": 1.0})
    got = read_answer(lm, bounded, streams(), good)
    assert [(s.lam, s.eps, s.eps_ex_post) for s in got.steps] == \
        [(0.2, 1.0, 0.9), (0.0, 1.0, 0.0), (0.5, 1.0, 1.0)]
    for bad in ({"eps_ex_post": None}, {"eps_ex_post": 1.5}):
        with pytest.raises(PairFailed, match="an impossible record at step 1"):
            read_answer(lm, bounded, streams(), record(s0={"eps_ex_post": 0.1}, s1=bad,
                                                       s2={"eps_ex_post": 0.1}))


def test_another_records_error_is_raised_as_it_is(tokenizer):
    lm = served(tokenizer, None)
    failure = ServerError(f"{WHERE} answered HTTP 500: broken", status=500)
    with pytest.raises(ServerError) as error:
        read_answer(lm, JOB, streams(), failure)
    assert error.value is failure and not isinstance(error.value, PairFailed)


@pytest.mark.parametrize("server, ranks", [({}, None), ({"data_parallel_size": 1}, None),
                                           ({"data_parallel_size": "two"}, None),
                                           ({"data_parallel_size": None}, None),
                                           ({"data_parallel_size": 4}, 4)])
def test_rank_headers_only_where_the_server_has_several_ranks(server, ranks):
    pairs = ["a" * 32, "b" * 32, "c" * 32]
    got = cid_plugin.rank_headers(pairs, server)
    assert got == (None if ranks is None else
                   [{RANK_HEADER: str(pair_rank(p, ranks))} for p in pairs])


@pytest.mark.parametrize("server, scores", [(None, False), ({}, False), ({"protocol": 1}, False),
                                            ({"protocol": 2}, True), ({"protocol": "3"}, True),
                                            ({"protocol": "two"}, False),
                                            ({"protocol": [2]}, False)])
def test_only_a_plugin_of_protocol_2_or_later_scores_pairs(server, scores):
    assert cid_plugin.scores_pairs(server) is scores


@pytest.mark.parametrize("server, records", [(None, False), ({"protocol": 2}, False),
                                             ({"protocol": 3}, True), ({"protocol": "4"}, True),
                                             ({"protocol": "three"}, False)])
def test_only_a_plugin_of_protocol_3_or_later_records_plain_cids_ex_post(server, records):
    assert cid_plugin.records_ex_post(server) is records


@pytest.mark.parametrize("records", [
    ServerError(f"{WHERE} answered HTTP 404", status=404),  # no route: no plugin
    {"steps": [], "server": {"plugin": "another"}},
    {"steps": [], "error": "void", "server": {"plugin": "ctxleak-cid"}},
    ["not", "an", "object"],
])
def test_a_server_without_ctxleaks_plugin_decodes_by_distributions(tokenizer, records):
    def answer(path, body):
        if path.startswith("/v1/ctxleak/pairs/"):
            if isinstance(records, Exception):
                raise records
            return records
        return streams((4,))

    lm = served(tokenizer, answer)
    assert cid_plugin.probe_plugin(lm) is None
    assert [p for p, _ in lm.sent] == ["/v1/completions"]


def test_a_probe_the_server_refuses_means_no_plugin(tokenizer):
    def answer(path, body):
        raise ServerError(f"{WHERE} answered HTTP 400: unknown field vllm_xargs", status=400)

    lm = served(tokenizer, answer)
    assert cid_plugin.probe_plugin(lm) is None
