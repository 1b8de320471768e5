"""RAG systems of the real frameworks as targets, built offline (LangChain's in-memory vector
store with a fake embedding and RunnableLambda steps, LlamaIndex's SummaryIndex with its
MockLLM, a Haystack pipeline with its BM25 retriever, prompt builder and a component of ours as
the generator): the answers and the retrieved documents are the framework's own; a step that
raises is one TargetError naming the question, with the answers before it. ctxleak never
imports the frameworks; only this module does."""

from __future__ import annotations

import pytest

from ctxleak.errors import ConfigError
from ctxleak.targets.base import FunctionTarget, TargetAnswer, TargetError
from ctxleak.targets.frameworks import (
    HaystackTarget,
    QueryEngineTarget,
    RunnableTarget,
    as_document,
    as_target,
)

TEXTS = {"fr": "the capital of france is paris .", "it": "the capital of italy is rome .",
         "de": "berlin is a city in germany ."}
QUESTIONS = ["what is the capital of france ?", "where is berlin ?", "is rome in italy ?"]


@pytest.fixture(scope="module")
def lc_chain():
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(page_content=t, id=k) for k, t in TEXTS.items()])
    retriever = store.as_retriever(search_kwargs={"k": 2})

    def generate(x):
        if "explode" in x["question"]:
            raise ValueError("the model is down")
        return {"answer": x["question"] + " -> " + x["context"][0].page_content,
                "context": x["context"]}

    chain = RunnableParallel(context=retriever, question=RunnablePassthrough()) \
        | RunnableLambda(generate)
    return chain, retriever


def test_a_langchain_chain_answers_with_its_retrieved_documents(lc_chain):
    chain, retriever = lc_chain
    target = as_target(chain, name="qa-chain")
    assert isinstance(target, RunnableTarget)
    got = target.answer(QUESTIONS)
    for question, answer in zip(QUESTIONS, got):
        want = retriever.invoke(question)
        assert answer.document_ids == tuple(d.id for d in want)
        assert answer.documents == tuple(d.page_content for d in want)
        assert answer.text == question + " -> " + want[0].page_content
    assert target.answer(QUESTIONS[:1]) == got[:1]  # one question: invoke, the same answer
    assert target.fingerprint() == "langchain:qa-chain:None:None"


def test_a_chain_that_raises_names_the_question_and_keeps_the_others(lc_chain):
    chain, _ = lc_chain
    questions = [QUESTIONS[0], "please explode", QUESTIONS[1]]
    with pytest.raises(TargetError, match=r"raised ValueError on question 2 \('please explode'"
                       r"\): the model is down") as err:
        RunnableTarget(chain).answer(questions)
    assert err.value.index == 1 and sorted(err.value.answered) == [0]
    assert "\n" not in str(err.value)


def test_a_chain_with_a_plain_string_or_a_keyed_output():
    from langchain_core.runnables import RunnableLambda

    upper = RunnableTarget(RunnableLambda(lambda q: q.upper()))
    assert upper.answer(["ab", "cd"]) == [TargetAnswer("AB"), TargetAnswer("CD")]
    keyed = RunnableTarget(RunnableLambda(lambda x: {"out": x["q"] * 2, "refs": ["a"]}),
                           input_key="q", output_key="out", documents_key="refs")
    assert keyed.answer(["x"]) == [TargetAnswer("xx", ("0",), ("a",))]
    nokey = RunnableTarget(RunnableLambda(lambda x: {"weird": 1}))
    with pytest.raises(TargetError, match="no answer or output .* key .*give output_key"):
        nokey.answer(["x"])


def test_a_llamaindex_query_engine_answers_with_its_source_nodes():
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, SummaryIndex
    from llama_index.core.llms import MockLLM

    index = SummaryIndex.from_documents([Document(text=t, id_=k) for k, t in TEXTS.items()])
    engine = index.as_query_engine(llm=MockLLM())
    target = as_target(engine, name="summary")
    assert isinstance(target, QueryEngineTarget)
    [got] = target.answer([QUESTIONS[0]])
    want = engine.query(QUESTIONS[0])
    assert got.text == want.response and QUESTIONS[0] in got.text  # MockLLM echoes its prompt
    assert got.document_ids == tuple(TEXTS) and got.documents == tuple(TEXTS.values())


def _haystack_pipeline(fail_on: str | None = None):
    from haystack import Document, Pipeline, component
    from haystack.components.builders import PromptBuilder
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    @component
    class Generator:
        @component.output_types(replies=list[str])
        def run(self, prompt: str):
            if fail_on and fail_on in prompt:
                raise RuntimeError("generator broke")
            return {"replies": ["GEN " + prompt]}

    store = InMemoryDocumentStore()
    store.write_documents([Document(content=t, id=k) for k, t in TEXTS.items()])
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=2))
    pipe.add_component("prompt", PromptBuilder(
        template="{% for d in documents %}{{ d.content }} {% endfor %}Q: {{ question }}",
        required_variables=["question", "documents"]))
    pipe.add_component("llm", Generator())
    pipe.connect("retriever.documents", "prompt.documents")
    pipe.connect("prompt.prompt", "llm.prompt")
    return pipe, store


def test_a_haystack_pipeline_with_its_sockets_inferred():
    pytest.importorskip("haystack")
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

    pipe, store = _haystack_pipeline()
    target = as_target(pipe, name="hay")
    assert isinstance(target, HaystackTarget)
    assert target.inputs == [("retriever", "query"), ("prompt", "question")]
    assert target.output == ("llm", "replies")
    got = target.answer(QUESTIONS)
    reference = InMemoryBM25Retriever(document_store=store, top_k=2)
    for question, answer in zip(QUESTIONS, got):
        want = reference.run(query=question)["documents"]
        assert answer.document_ids == tuple(d.id for d in want)
        assert answer.text == "GEN " + " ".join(d.content for d in want) + " Q: " + question


def test_haystack_settings_and_failures():
    pytest.importorskip("haystack")
    pipe, _ = _haystack_pipeline(fail_on="berlin")
    target = HaystackTarget(pipe, inputs=["retriever.query", "prompt.question"],
                            output="llm.replies", documents="retriever")
    with pytest.raises(TargetError, match=r"question 2 \('where is berlin \?'\)") as err:
        target.answer(QUESTIONS)
    assert sorted(err.value.answered) == [0] and err.value.answered[0].document_ids
    with pytest.raises(ConfigError, match="not among the pipeline's sockets") as bad:
        HaystackTarget(pipe, inputs="prompt.nothing")
    assert bad.value.param == "inputs"
    with pytest.raises(ConfigError, match=r"output: \['llm.nope'\] are not among"):
        HaystackTarget(pipe, output="llm.nope")
    from haystack import Pipeline

    only = Pipeline()
    only.add_component("retriever", pipe.get_component("retriever").__class__(
        document_store=pipe.get_component("retriever").document_store))
    with pytest.raises(ConfigError, match="output: none of the pipeline's sockets "
                       r"\['retriever.documents'\] is named replies or"):
        HaystackTarget(only)


def test_functions_and_targets_and_what_is_neither():
    def rag(question):
        return question[::-1], ["doc a", {"id": "b", "text": "doc b"}]

    target = as_target(rag)
    assert isinstance(target, FunctionTarget) and target.name == "rag"
    assert target.answer(["abc"]) == [TargetAnswer("cba", ("0", "b"), ("doc a", "doc b"))]
    assert as_target(target) is target
    with pytest.raises(ConfigError, match="takes no settings"):
        as_target(target, name="x")
    with pytest.raises(ConfigError, match="cannot audit a int"):
        as_target(3)
    with pytest.raises(ConfigError, match="only name="):
        as_target(rag, input_key="q")
    calls = []

    def flaky(question):
        calls.append(question)
        if len(calls) == 2:
            raise KeyError("gone")
        return "ok"

    with pytest.raises(TargetError, match="flaky raised KeyError on question 2") as err:
        as_target(flaky).answer(["a", "b", "c"])
    assert err.value.answered == {0: TargetAnswer("ok")}


def test_documents_of_every_shape():
    assert as_document("text", 3) == ("3", "text")
    assert as_document({"content": "c", "id": 7}, 0) == ("7", "c")
    with pytest.raises(TypeError, match="no text found"):
        as_document(object(), 0)
