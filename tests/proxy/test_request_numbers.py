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
