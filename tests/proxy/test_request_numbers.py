"""Numbers a request sets, read once with the domain they name: an integer beyond float64 in
any numeric field (CID's λ and ε, the temperature, a mechanism's parameters) is HTTP 400 naming
the field, never an OverflowError and a 500; true is not a number; a mechanism's ε below what
its claim can carry is refused rather than claimed as 0. And a key sent in the query string
never reaches the access log."""

from __future__ import annotations

import logging

import pytest

from ctxleak.proxy.app import NoQueryString
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.request import ProxyError, parse_request

HUGE = 10 ** 400
DOCS = [{"id": "a", "text": "the code is 4471"}, {"id": "b", "text": "the door is blue"},
        {"id": "c", "text": "the key is under the mat"}]


def _parse(**fields):
    body = {"model": "m", "messages": [{"role": "user", "content": "what is the code?"}],
            **fields}
    return parse_request(body, ProxyConfig(allow_any_mechanism=True))


@pytest.mark.parametrize("fields, param", [
    ({"ctxleak": {"documents": DOCS, "lambda": HUGE}}, "ctxleak.lambda"),
    ({"ctxleak": {"documents": DOCS, "epsilon": HUGE}}, "ctxleak.epsilon"),
    ({"ctxleak": {"documents": DOCS, "lambda": 0.5}, "temperature": -HUGE}, "temperature"),
    ({"ctxleak": {"documents": DOCS, "mechanism": {"name": "dp-rag", "eps": HUGE}}},
     "ctxleak.mechanism"),
    ({"ctxleak": {"documents": DOCS, "mechanism": {"name": "dp-rag", "eps": True}}},
     "ctxleak.mechanism"),
    ({"ctxleak": {"documents": DOCS, "mechanism": {"name": "dp-vote", "eps": 1,
                                                     "shards": 3.5}}}, "ctxleak.mechanism"),
    ({"ctxleak": {"documents": DOCS, "mechanism": "dp-rag:eps=4.9e-324"}}, "ctxleak.mechanism"),
    ({"ctxleak": {"documents": DOCS, "mechanism": {"name": "dp-vote", "eps": 2,
                                                     "shards": 3, "eps_token": 1e-300}}},
     "ctxleak.mechanism"),
])
def test_a_number_out_of_its_domain_is_a_400_naming_the_field(fields, param):
    with pytest.raises(ProxyError) as caught:
        _parse(**fields)
    assert caught.value.status == 400 and caught.value.param == param
    assert len(caught.value.message) < 400  # a 400-digit number is not echoed whole


def test_numbers_in_their_domain_still_parse():
    request = _parse(ctxleak={"documents": DOCS, "mechanism": {"name": "dp-vote", "eps": 2,
                                                               "shards": 3}})
    assert request.mechanism.key() == "dp-vote(eps=2,shards=3,delta=0.0001)"
    assert request.claim.eps == pytest.approx(2.0)
    assert _parse(ctxleak={"documents": DOCS, "lambda": 1}).mechanism.key().startswith("cid")


def test_a_key_in_the_query_string_never_reaches_the_access_log():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "POST",
                                                           "/v1/chat/completions?api_key=sk-1",
                                                           "1.1", 200), None)
    assert NoQueryString().filter(record)
    assert "sk-1" not in record.getMessage()
    assert record.getMessage() == '127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200'


def test_decoding_through_the_upstream_sends_only_the_key_named_for_it(monkeypatch, tmp_path):
    """``ctxleak serve --decode upstream`` sends its upstream the key of --upstream-key-env
    and no other: not OPENAI_API_KEY or CTXLEAK_API_KEY, which may be another service's."""
    import ctxleak.engine.models as models
    import ctxleak.engine.served.connect as connect
    import ctxleak.proxy.app as proxy_app
    from ctxleak.cli.app import main

    seen: list[dict] = []
    monkeypatch.setattr(models, "load_model", lambda name, **kw: seen.append(kw))
    monkeypatch.setattr(proxy_app, "run_proxy", lambda lm, **kw: None)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-service")
    monkeypatch.setenv("UPSTREAM_KEY", "sk-the-upstream")
    for extra, want in (([], None), (["--upstream-key-env", "UPSTREAM_KEY"], "UPSTREAM_KEY")):
        with pytest.raises(SystemExit) as ok:
            main(["serve", "--ledger", str(tmp_path / f"l{len(seen)}.db"), "--decode",
                  "upstream", "--upstream", "http://127.0.0.1:9", *extra])
        assert ok.value.code == 0
        assert seen[-1]["api_key_env"] == want and seen[-1]["env_fallback"] is False
    # and the client the served model makes reads no other variable
    keys: list = []

    class Client:
        def __init__(self, url, api_key=None, options=None):
            keys.append(api_key)
            raise RuntimeError("stop here")

    monkeypatch.setattr(connect, "ServedClient", Client)
    for fallback, want in ((False, None), (True, "sk-another-service")):
        with pytest.raises(RuntimeError):
            connect.serve("default", "http://127.0.0.1:9", env_fallback=fallback, check=False)
        assert keys[-1] == want
    with pytest.raises(RuntimeError):
        connect.serve("default", "http://127.0.0.1:9", api_key_env="UPSTREAM_KEY",
                      env_fallback=False, check=False)
    assert keys[-1] == "sk-the-upstream"
