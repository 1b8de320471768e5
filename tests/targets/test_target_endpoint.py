"""An OpenAI-compatible chat endpoint as a target, through the real openai client against a
scripted fake server: answers in order, 429, 5xx and a timeout retried (Retry-After honoured),
garbage and a refusal each one TargetError naming the question with the answers already had,
and the API key read from the variable named and never shown."""

from __future__ import annotations

import email.utils
import threading
import time

import pytest
from helpers.fake_chat import Reply, completion, echo, fake_chat, script

import ctxleak.targets.endpoint as endpoint_module
from ctxleak.errors import ConfigError
from ctxleak.targets.base import TargetError
from ctxleak.targets.endpoint import MAX_WAIT_S, ChatEndpointTarget, _Pace, retry_delay

KEY = "sk-test-0123456789abcdef"


def target(url, **kw):
    kw.setdefault("retries", 2)
    kw.setdefault("backoff_s", 0.0)
    return ChatEndpointTarget(url, "fake-model", **kw)


def failing_on(word, reply):
    """A reply function that answers ``reply`` to questions holding ``word``, else echoes."""
    def answer(body, headers):
        return reply if word in body["messages"][-1]["content"] else echo(body, headers)
    return answer


def test_answers_in_order_with_the_settings_and_the_key_from_the_variable(monkeypatch):
    monkeypatch.setenv("FAKE_KEY", KEY)
    with fake_chat() as server:
        t = target(server.url, api_key_env="FAKE_KEY", system="be brief", max_tokens=7,
                   temperature=0.5, seed=3, extra_body={"top_k": 2}, concurrency=3)
        got = t.answer([f"q{k}" for k in range(7)])
    assert [a.text for a in got] == [f"answer: q{k}" for k in range(7)]
    assert all(a.document_ids is None for a in got)
    body, headers = server.requests[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert (body["max_tokens"], body["temperature"], body["seed"], body["top_k"]) == (7, 0.5, 3, 2)
    assert body["model"] == "fake-model" and len(server.requests) == 7


def test_429_then_success_waits_what_retry_after_says():
    replies = [Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}),
               Reply(503, {"error": {"message": "busy"}}, {"retry-after-ms": "250"}),
               Reply(500, {"error": {"message": "oops"}})]
    with fake_chat(script(replies)) as server:
        t = target(server.url, retries=3, backoff_s=0.5, concurrency=1)
        waits: list[float] = []
        t._sleep = waits.append
        [got] = t.answer(["hello"])
    assert got.text == "answer: hello" and len(server.requests) == 4
    assert waits == [7.0, 0.25, 0.5 * 2 ** 2]


def test_5xx_past_the_retries_is_one_error_naming_the_question_keeping_the_answers():
    with fake_chat(failing_on("bad", Reply(500, {"error": {"message": "down"}}))) as server:
        t = target(server.url, retries=2, concurrency=1)
        t._sleep = lambda s: None
        with pytest.raises(TargetError) as err:
            t.answer(["good one", "the bad one", "never mind"])
    assert err.value.index == 1
    message = str(err.value)
    assert "question 2 ('the bad one')" in message and "HTTP 500" in message
    assert "after 3 tries" in message and "\n" not in message
    assert err.value.answered[0].text == "answer: good one" and 1 not in err.value.answered
    assert server.asked().count("the bad one") == 3


def test_a_timeout_is_retried_a_bounded_number_of_times():
    waits: list[float] = []
    with fake_chat(script([Reply(hang=True)])) as server:  # the first request hangs
        t = target(server.url, timeout_s=0.5, retries=2, backoff_s=0.25)
        t._sleep = waits.append
        assert [a.text for a in t.answer(["slow"])] == ["answer: slow"]
        assert server.asked() == ["slow", "slow"] and waits == [0.25]
    with fake_chat(failing_on("slow", Reply(hang=True))) as server:
        t = target(server.url, timeout_s=0.5, retries=1)
        with pytest.raises(TargetError, match=r"question 1 \('slow'\): no answer within 0.5 s "
                           r"from .* after 2 tries"):
            t.answer(["slow"])
        assert len(server.requests) == 2


@pytest.mark.parametrize("reply, words", [
    (Reply(body=b"{not json"), "not a chat completion"),
    (Reply(body=b"<html>hi</html>", headers={"content-type": "text/html"}),
     "not a chat completion"),
    (Reply(body={"object": "chat.completion", "choices": []}), "not a chat completion"),
    (Reply(body=completion(None, refusal="I cannot share that")),
     "refused: I cannot share that"),
    (Reply(body=completion("", finish="content_filter")), "content filter"),
    (Reply(body=completion(None)), "no text"),
    (Reply(400, {"error": {"message": "max_tokens too large"}}), "HTTP 400"),
])
def test_garbage_refusals_and_client_errors_are_one_line_errors(reply, words):
    with fake_chat(failing_on("x", reply)) as server:
        t = target(server.url)
        with pytest.raises(TargetError) as err:
            t.answer(["fine", "x marks it"])
    assert words in str(err.value) and "question 2" in str(err.value)
    assert "\n" not in str(err.value) and err.value.index == 1
    assert len(server.asked()) == 2  # not retried


def test_the_key_never_shows(monkeypatch):
    monkeypatch.setenv("FAKE_KEY", KEY)

    def leaky(body, headers):  # a server that echoes the request's headers in its error
        return Reply(401, {"error": {"message": f"bad key {headers['authorization']}"}})

    with fake_chat(leaky) as server:
        t = target(server.url, api_key_env="FAKE_KEY")
        with pytest.raises(TargetError) as err:
            t.answer(["q"])
    assert "HTTP 401" in str(err.value) and "***" in str(err.value)
    for shown in (str(err.value), t.describe(), t.fingerprint(), repr(err.value)):
        assert KEY not in shown and KEY[:12] not in shown
    assert "FAKE_KEY" not in t.fingerprint()


def test_a_missing_variable_and_bad_settings_are_config_errors(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY is not set") as err:
        ChatEndpointTarget("http://127.0.0.1:1/v1", "m", api_key_env="NO_SUCH_KEY")
    assert err.value.param == "api_key_env"
    for kw in ({"concurrency": 0}, {"rate_per_s": 0}, {"timeout_s": -1}, {"retries": -1},
               {"max_tokens": 0}, {"temperature": -0.1}):
        with pytest.raises(ConfigError) as err:
            ChatEndpointTarget("http://127.0.0.1:1/v1", "m", **kw)
        assert err.value.param == next(iter(kw))
    with pytest.raises(ConfigError, match="http"):
        ChatEndpointTarget("127.0.0.1:8000", "m")


def test_fingerprint_follows_what_changes_answers():
    a = ChatEndpointTarget("http://h/v1", "m")
    assert a.fingerprint() == ChatEndpointTarget("http://h/v1/", "m", concurrency=9).fingerprint()
    assert a.fingerprint() != ChatEndpointTarget("http://h/v1", "m", temperature=1).fingerprint()
    assert a.fingerprint() != ChatEndpointTarget("http://h/v1", "n").fingerprint()


def test_retry_delay_by_hand():
    assert retry_delay(0, {"Retry-After": "3"}, 1.0) == 3.0
    assert retry_delay(0, {"retry-after-ms": "1500", "retry-after": "9"}, 1.0) == 1.5
    assert retry_delay(3, None, 0.5) == 4.0
    assert retry_delay(2, {"retry-after": "soon"}, 1.0) == 4.0
    assert retry_delay(0, {"retry-after": "100000"}, 1.0) == MAX_WAIT_S
    assert retry_delay(0, {"retry-after": "-5"}, 1.0) == 0.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_delay(0, {"Retry-After": later}, 1.0) <= 31


def test_at_most_concurrency_requests_in_flight():
    lock, now, most = threading.Lock(), [0], [0]

    def slow(body, headers):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        threading.Event().wait(0.02)
        with lock:
            now[0] -= 1
        return echo(body, headers)

    with fake_chat(slow) as server:
        got = target(server.url, concurrency=2).answer([f"q{k}" for k in range(8)])
    assert [a.text for a in got] == [f"answer: q{k}" for k in range(8)]
    assert 1 <= most[0] <= 2


def test_the_pace_spaces_starts_by_one_over_the_rate(monkeypatch):
    clock, waits = [100.0], []
    monkeypatch.setattr(endpoint_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(endpoint_module.time, "sleep", waits.append)
    pace = _Pace(4.0)
    for _ in range(3):
        pace.wait()
    clock[0] = 101.0  # a second later: the next start is due at once
    pace.wait()
    assert waits == [0.25, 0.5]
    _Pace(None).wait()
    assert waits == [0.25, 0.5]


def test_a_spent_quota_is_not_retried():
    quota = Reply(429, {"error": {"message": "You exceeded your current quota",
                                  "type": "insufficient_quota", "code": "insufficient_quota"}})
    with fake_chat(failing_on("q", quota)) as server:
        with pytest.raises(TargetError, match=r"quota or privacy budget .* \(not retried\)"):
            target(server.url, retries=3).answer(["q"])
    assert len(server.requests) == 1


def test_without_api_key_env_no_key_from_the_environment_is_sent(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the openai client's own default: not used
    with fake_chat() as server:
        target(server.url).answer(["q"])
    [(_, headers)] = server.requests
    assert headers["authorization"] == "Bearer EMPTY" and KEY not in str(headers)
