"""The proxy from LangChain and LlamaIndex (issue 83, item 2): ``CtxleakChat`` (the real
langchain-openai client), ``ctxleak_rag_chain``, the bundled example app and LlamaIndex's
``CtxleakQueryEngine`` through ``ctxleak serve`` with the operator's classes; public documents
are not charged, the ledger equals what the answers report, bad metadata is one line."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from helpers.proxy_server import serving_sqlite
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_openai import ChatOpenAI

from ctxleak.errors import ConfigError, InputError
from ctxleak.integrations.langchain import (
    FIELD,
    SENT,
    CtxleakChat,
    ctxleak_rag_chain,
    marked_documents,
    spent_by_document,
    stable_id,
)
from ctxleak.proxy import Budgets

NO_ID = "the clinic opens at nine on monday"
STORE = [
    Document(page_content="the doctor said the capital of italy is rome", id="faq-2",
             metadata={"class": "public"}),
    Document(page_content="the patient name is paris and the phone is one two three",
             id="acct-7", metadata={"class": "restricted"}),
    Document(page_content="the patient of the clinic is called rome", id="acct-8",
             metadata={"class": "restricted"}),
    Document(page_content=NO_ID),  # no id, no class: a stable id, the default budget
]
CLASSES = {"faq-2": "public", "acct-7": "restricted", "acct-8": "restricted"}
QUESTIONS = ["what is the name of the patient ?", "what is the capital of italy ?",
             "when does the clinic open ?"]


class WordRetriever(BaseRetriever):
    """The ``k`` documents sharing most words with the query (ties: store order)."""

    documents: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        words = set(query.split())
        return sorted(self.documents,
                      key=lambda d: -len(words & set(d.page_content.split())))[: self.k]


def chat(url: str, **kw: Any) -> CtxleakChat:
    return CtxleakChat(base_url=url + "/v1", api_key="none", model="tiny", max_tokens=6,
                       temperature=1.0, max_retries=0, **kw)


def test_stable_id_and_the_marked_documents_by_hand():
    # sha256("abc") = ba7816bf8f01cfea414140de5dae2223...
    assert stable_id("abc") == "sha256-ba7816bf8f01cfea"
    assert marked_documents(STORE[1:]) == [
        {"id": "acct-7", "text": STORE[1].page_content, "class": "restricted"},
        {"id": "acct-8", "text": STORE[2].page_content, "class": "restricted"},
        {"id": stable_id(NO_ID), "text": NO_ID}]
    doc = Document(page_content="x y", metadata={"doc": "d-1", "tier": "public"})
    assert marked_documents([doc], id_key="doc", class_key="tier") == [
        {"id": "d-1", "text": "x y", "class": "public"}]


@pytest.mark.parametrize("doc, key, field", [
    (Document(page_content="x", metadata={"doc": 7}), "doc", "metadata['doc']"),
    (Document(page_content="x", metadata={"doc": True}), "doc", "metadata['doc']"),
    (Document(page_content="x", metadata={"class": 3}), None, "metadata['class']"),
    (Document(page_content=" "), None, "page_content"),
])
def test_bad_metadata_is_one_line_naming_the_field(doc, key, field):
    with pytest.raises(InputError) as err:
        marked_documents([doc], id_key=key)
    assert err.value.field == field and "\n" not in str(err.value)
    assert str(err.value).startswith(f"field '{field}': document 0")


def test_the_rag_chain_runs_through_the_proxy_and_the_ledger_equals_its_answers(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", classes=CLASSES,
                        budgets=Budgets(default=40.0, classes={"restricted": 30.0})
                        ) as (url, ledger, _):
        chain = ctxleak_rag_chain(WordRetriever(documents=STORE), chat(url, epsilon=0.5))
        answers = [chain.invoke(q) for q in QUESTIONS[:2]]
        answers.append(asyncio.run(chain.ainvoke(QUESTIONS[2])))  # the async road too
        seen: set[str] = set()
        for answer in answers:
            field = answer.response_metadata[FIELD]
            assert field["mode"] == "bounded" and field["dropped"] == []
            # bounded CID charges ε per released token, the stopping EOS included
            assert field["epsilon_spent"] == pytest.approx(0.5 * field["tokens"])
            assert 1 <= field["tokens"] <= 7
            sent = answer.response_metadata[SENT]
            assert all("text" not in d for d in sent) and len(sent) == 2
            assert set(field["documents"]) == {d["id"] for d in sent}
            seen |= set(field["documents"])
            assert isinstance(answer.content, str)
        assert {"faq-2", "acct-7", stable_id(NO_ID)} <= seen
        spent = spent_by_document(answers)
        assert set(spent) == {"acct-7", "acct-8", stable_id(NO_ID)}
        assert all(eps >= 0.5 for eps in spent.values())
        assert "faq-2" not in spent and ledger.find("faq-2") is None  # public: never charged
        assert set(spent) == {d.doc_id for d in ledger.documents(0, 100)}
        for doc_id, eps in spent.items():
            row = ledger.document(doc_id)
            assert row.spent == pytest.approx(eps, abs=1e-9) and row.reserved == 0
        assert ledger.document("acct-7").budget == 30.0
        assert ledger.document(stable_id(NO_ID)).budget == 40.0  # no class: the default

        # streamed: the first chunk carries what was sent, the last the proxy's field
        docs = STORE[:2]
        chunks = list(chat(url, epsilon=0.5).stream(QUESTIONS[0], documents=docs))
        assert chunks[0].response_metadata[SENT] == [
            {"id": "faq-2", "class": "public"}, {"id": "acct-7", "class": "restricted"}]
        [last] = [c for c in chunks if FIELD in c.response_metadata]
        streamed = last.response_metadata[FIELD]
        assert streamed["documents"] == ["faq-2", "acct-7"]
        before = spent["acct-7"]
        assert ledger.document("acct-7").spent == pytest.approx(
            before + streamed["epsilon_spent"], abs=1e-9)
        assert streamed["epsilon_spent"] == pytest.approx(0.5 * streamed["tokens"])


def test_a_class_the_file_does_not_give_is_one_line_and_charges_nothing(lm, tmp_path):
    with serving_sqlite(lm, tmp_path / "l.db", classes=CLASSES,
                        budgets=Budgets(default=40.0)) as (url, ledger, _):
        llm = chat(url, epsilon=0.5)
        doc = Document(page_content="the phone is one two three", id="acct-9",
                       metadata={"class": "secret"})
        for call in (llm.invoke, lambda q, **kw: list(llm.stream(q, **kw)),
                     lambda q, **kw: asyncio.run(llm.ainvoke(q, **kw))):
            with pytest.raises(InputError) as err:
                call(QUESTIONS[0], documents=[doc])
            message = str(err.value)
            assert "\n" not in message and "class_not_set" in message
            assert "'acct-9'" in message and "'secret'" in message
            assert message.startswith("field 'ctxleak.documents': ctxleak serve refused")
        # the operator's class, contradicted
        wrong = Document(page_content="x", id="faq-2", metadata={"class": "restricted"})
        with pytest.raises(InputError, match=r"class_conflict.*'public'"):
            llm.invoke(QUESTIONS[0], documents=[wrong])
        with pytest.raises(InputError, match=r"metadata\['doc'\].*not 7"):
            chat(url, epsilon=0.5, id_key="doc").invoke(
                QUESTIONS[0], documents=[Document(page_content="x", metadata={"doc": 7})])
        # plain CID for a budgeted document: the proxy's HTTP 403, one line too
        with pytest.raises(InputError) as err:
            chat(url, cid_lambda=0.5).invoke(QUESTIONS[0], documents=STORE[1:2])
        assert str(err.value).startswith("field 'ctxleak.documents': ctxleak serve refused the "
                                         "request (HTTP 403")
        assert "\n" not in str(err.value) and "acct-7" in str(err.value)
        assert ledger.count() == 0


def test_the_chain_wants_a_ctxleak_chat_and_spent_wants_its_replies(lm):
    with pytest.raises(ConfigError, match="CtxleakChat"):
        ctxleak_rag_chain(WordRetriever(documents=STORE),
                          ChatOpenAI(api_key="none", base_url="http://127.0.0.1:9/v1"))
    from langchain_core.messages import AIMessage
    with pytest.raises(InputError, match=r"answer 0 has no ctxleak field"):
        spent_by_document([AIMessage(content="hi")])
    # by hand: two answers, a public document never counted, a dropped one not used
    reply = AIMessage(content="a", response_metadata={
        FIELD: {"epsilon_spent": 1.5, "documents": ["p", "a"], "dropped": ["b"]},
        SENT: [{"id": "p", "class": "public"}, {"id": "a"}, {"id": "b"}]})
    again = AIMessage(content="b", response_metadata={
        FIELD: {"epsilon_spent": 0.25, "documents": ["a", "b"], "dropped": []},
        SENT: [{"id": "a"}, {"id": "b", "class": "restricted"}]})
    assert spent_by_document([reply, again]) == {"a": 1.75, "b": 0.25}
    assert re.fullmatch(r"sha256-[0-9a-f]{16}", stable_id("é"))


def test_the_example_app_runs_through_the_proxy_with_its_classes(lm, tmp_path, monkeypatch,
                                                                 capsys):
    """examples/rag_langchain_proxy.py against ``ctxleak serve --budget 16 --classes
    examples/rag_classes.jsonl``: the public help-desk page is used and never charged, and the
    ledger holds, per restricted document, the sum of what the answers report."""
    from pathlib import Path

    examples = Path(__file__).parents[2] / "examples"
    monkeypatch.syspath_prepend(str(examples))
    import rag_langchain_proxy as app

    with serving_sqlite(lm, tmp_path / "l.db", classes=examples / "rag_classes.jsonl",
                        budgets=Budgets(default=16.0)) as (url, ledger, _):
        answers = app.main(url + "/v1", model="tiny", max_tokens=8)
        used = {i for a in answers for i in a.response_metadata[FIELD]["documents"]}
        assert "it-helpdesk" in used and ledger.find("it-helpdesk") is None
        spent = spent_by_document(answers)
        assert set(spent) == used - {"it-helpdesk"} and len(spent) >= 4
        assert {d.doc_id: d.spent for d in ledger.documents(0, 100)} == pytest.approx(spent)
        assert all(ledger.document(i).doc_class == "restricted" for i in spent)
    out = capsys.readouterr().out
    assert out.count("Q: ") == 5 and "ε spent per restricted document:" in out


def test_the_llamaindex_engine_runs_through_the_proxy_and_its_ledger_agrees(lm, tmp_path):
    """The LlamaIndex query engine over the same documents as nodes, through the proxy with
    classes: the public node is used and never charged, the ledger equals the responses, a
    node id that is no string and a class the file lacks are one line."""
    from llama_index.core.retrievers import BaseRetriever as LlamaRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    from ctxleak.integrations import llamaindex

    nodes = [TextNode(text=d.page_content, id_=d.id or stable_id(d.page_content),
                      metadata=dict(d.metadata)) for d in STORE]

    class Words(LlamaRetriever):
        def __init__(self, store: list[TextNode]) -> None:
            super().__init__()
            self.store = store

        def _retrieve(self, query_bundle: Any) -> list[NodeWithScore]:
            words = set(query_bundle.query_str.split())
            scored = [NodeWithScore(node=n, score=float(len(words & set(n.text.split()))))
                      for n in self.store]
            return sorted(scored, key=lambda s: -s.score)[:2]

    with serving_sqlite(lm, tmp_path / "l.db", classes=CLASSES,
                        budgets=Budgets(default=40.0)) as (url, ledger, _):
        engine = llamaindex.CtxleakQueryEngine(retriever=Words(nodes), base_url=url + "/v1",
                                               model="tiny", epsilon=0.5, max_tokens=6,
                                               temperature=1.0)
        responses = [engine.query(q) for q in QUESTIONS]
        for r in responses:
            field = r.metadata[llamaindex.FIELD]
            assert field["epsilon_spent"] == pytest.approx(0.5 * field["tokens"])
            assert field["documents"] == [n.node.node_id for n in r.source_nodes]
        spent = llamaindex.spent_by_document(responses)
        assert ledger.find("faq-2") is None and "faq-2" not in spent
        assert {d.doc_id: d.spent for d in ledger.documents(0, 100)} == pytest.approx(spent)
        assert set(spent) == {"acct-7", "acct-8", stable_id(NO_ID)}
        bad = TextNode(text="x", metadata={"doc": 7})
        with pytest.raises(InputError, match=r"^field 'metadata\['doc'\]': document 0: the id"):
            llamaindex.marked_nodes([bad], id_key="doc")
        secret = TextNode(text="the phone is one two three", id_="acct-9",
                          metadata={"class": "secret"})
        engine.retriever = Words([secret])
        with pytest.raises(InputError, match=r"^field 'ctxleak.documents'.*class_not_set"):
            engine.query(QUESTIONS[0])
        assert ledger.find("acct-9") is None
