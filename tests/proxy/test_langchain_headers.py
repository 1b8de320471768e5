"""The ledger reaches a LangChain app: the real ``ChatOpenAI`` (langchain-openai) against the
proxy, the documented recipe (``include_response_headers=True``, the documents in
``extra_body``), its reply carrying the ledger in ``response_metadata["headers"]``, equal to
what the ledger charged; streamed, the first chunk carries the reservation."""

from __future__ import annotations

import json

import langchain_openai
import pytest
from helpers.proxy_server import serving as proxy_serving

from ctxleak.proxy.budget import SQLiteLedger

DOCS = [{"id": "acct-7", "text": "the patient name is paris and the phone is one two three"}]


def test_chatopenai_reads_the_ledger_from_the_headers(lm, tmp_path):
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    with proxy_serving(lm, ledger) as (url, _):
        llm = langchain_openai.ChatOpenAI(base_url=url + "/v1", api_key="none", model="tiny",
                                          max_tokens=6, temperature=1.0, max_retries=0,
                                          include_response_headers=True)
        reply = llm.invoke("what is the name of the patient ?",
                           extra_body={"ctxleak": {"documents": DOCS, "epsilon": 0.5}})
        headers = reply.response_metadata["headers"]
        assert "x-ctxleak-charged" not in headers  # the operator's (issue 81)
        assert headers["x-ctxleak-mode"] == "bounded"
        assert json.loads(headers["x-ctxleak-documents"]) == ["acct-7"]
        assert json.loads(headers["x-ctxleak-dropped"]) == []
        spent = ledger.find("acct-7").spent
        assert spent > 0
        assert float(headers["x-ctxleak-epsilon-spent"]) == pytest.approx(spent)
        first = next(iter(llm.stream("what is the name of the patient ?",
                                     extra_body={"ctxleak": {"documents": DOCS,
                                                             "epsilon": 0.5}})))
        streamed = first.response_metadata["headers"]
        assert json.loads(streamed["x-ctxleak-documents"]) == ["acct-7"]
        assert "x-ctxleak-epsilon-reserved" not in streamed
    ledger.close()
