"""The bounds on what one request may ask of the proxy (issue 84), each a 4xx naming the field
and checked before the decoder is called (asserted by counting its calls, not by time): the
number of messages, the characters of one, the prompt's tokens against the model's window
(the tiny model's is 256 positions), and sampling fields the proxy does not implement."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from helpers.proxy_server import serving_sqlite

from ctxleak.proxy import Budgets, ProxyConfig
from ctxleak.proxy.bounds import check_messages, check_prompt, prompt_tokens
from ctxleak.proxy.request import ProxyError, parse_request

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"}]
QUESTION = "what is the name of the patient ?"


def ask(url: str, messages: list[dict[str, Any]], **body: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": "tiny", "messages": messages, "temperature": 0.8, "max_tokens": 4,
        "ctxleak": {"documents": DOCS, "epsilon": 0.5}, **body})


def counting(app: Any) -> list[int]:
    """Count the proxy's calls of its decoder (every answer goes through ``Proxy._answer``)."""
    proxy, calls = app.state.proxy, []
    real = proxy._answer

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    proxy._answer = spy
    return calls


def test_oversized_requests_are_refused_by_field_before_the_decoder(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", budgets=Budgets(default=100.0)
                        ) as (url, ledger, app):
        calls = counting(app)
        # 10,000 one-word messages (about 80 KB, under the 1 MiB body limit)
        many = [{"role": "user", "content": "word"}] * 10_000
        r = ask(url, many)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages" and err["code"] == "over_limit"
        assert "10000 messages" in err["message"] and "256" in err["message"]
        # 200 messages (under max_messages) whose prompt passes the 256-position window
        r = ask(url, [{"role": "user", "content": "the patient phone"}] * 200)
        assert r.status_code == 413, r.text
        err = r.json()["error"]
        assert err["param"] == "messages" and err["code"] == "prompt_too_long"
        assert "window of 256" in err["message"]
        # one message alone longer than the window
        r = ask(url, [{"role": "user", "content": " ".join(["patient"] * 400)}])
        assert r.status_code == 413 and r.json()["error"]["code"] == "prompt_too_long"
        # the same message in text parts is counted the same
        r = ask(url, [{"role": "user", "content": [{"type": "text", "text": "patient " * 200},
                                                   {"type": "text", "text": "phone " * 200}]}])
        assert r.status_code == 413 and r.json()["error"]["code"] == "prompt_too_long"
        assert calls == []  # the decoder never ran
        assert ledger.open_reservations() == [] and ledger.count() == 0  # nothing reserved
        # a prompt that fits is answered: the bound is not a refusal of everything
        r = ask(url, [{"role": "user", "content": QUESTION}])
        assert r.status_code == 200, r.text
        assert calls == [1]


def test_a_message_over_max_message_chars_is_413_naming_it(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", max_message_chars=100, max_messages=3
                        ) as (url, _, app):
        calls = counting(app)
        r = ask(url, [{"role": "user", "content": "hi"}, {"role": "user", "content": "x" * 101}])
        assert r.status_code == 413
        err = r.json()["error"]
        assert err["param"] == "messages[1].content" and err["code"] == "message_too_long"
        assert "101 characters" in err["message"] and "100" in err["message"]
        r = ask(url, [{"role": "user", "content": "hi"}] * 4)
        assert r.status_code == 400 and "max_messages of 3" in r.json()["error"]["message"]
        assert calls == []


def test_the_window_check_is_the_prompts_tokens_plus_max_tokens(lm):
    """At the boundary: a prompt of n tokens fits with max_tokens = window − n, not one
    more."""
    config = ProxyConfig(max_tokens_limit=512)
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4,
            "temperature": 0.8, "ctxleak": {"documents": DOCS, "epsilon": 0.5}}
    request = parse_request(body, config)
    n = prompt_tokens(lm, request)
    assert n > len(lm.encode(QUESTION))  # the question and the template around it
    window = lm.max_length
    assert window == 256
    assert check_prompt(lm, replace(request, max_tokens=window - n)) == n
    with pytest.raises(ProxyError) as caught:
        check_prompt(lm, replace(request, max_tokens=window - n + 1))
    assert caught.value.status == 413 and f"needs {window + 1} positions" in caught.value.message


def test_check_messages_ignores_what_is_refused_elsewhere_by_name():
    config = ProxyConfig(max_messages=2, max_message_chars=5)
    check_messages(None, config)  # (refused by name where the prompt is read)
    check_messages([{"role": "user", "content": [{"type": "image_url"}]}], config)
    with pytest.raises(ProxyError) as caught:
        check_messages([{"content": [{"type": "text", "text": "abc"},
                                     {"type": "text", "text": "def"}]}], config)
    assert caught.value.param == "messages[0].content" and "6 characters" in caught.value.message


@pytest.mark.parametrize("field,value", [("top_k", 5), ("min_p", 0.1), ("repetition_penalty", 1.1),
                                         ("top_k", -1), ("best_of", 2)])
def test_sampling_fields_the_proxy_ignores_are_refused(field, value):
    body = {"messages": [{"role": "user", "content": QUESTION}], field: value,
            "ctxleak": {"documents": DOCS, "epsilon": 0.5}}
    with pytest.raises(ProxyError) as caught:
        parse_request(body, ProxyConfig())
    assert caught.value.status == 400 and caught.value.param == field
    assert caught.value.code == "unsupported_field"


def test_unsupported_field_over_http(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db") as (url, _, app):
        calls = counting(app)
        r = ask(url, [{"role": "user", "content": QUESTION}], min_p=0.05)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "unsupported_field"
        assert r.json()["error"]["param"] == "min_p"
        assert calls == []
