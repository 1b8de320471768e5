"""The real RAG frameworks' retrievers (no network, no model download) in a tiny-model influence
run (Def. 3.1 of "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models" with S = one retrieved document): each document's id, source, rank and score land in the
records. ctxleak never imports the frameworks; only this test module does."""

from __future__ import annotations

import pytest

import ctxleak

TEXTS = {"fr": "the capital of france is paris .", "de": "berlin is in germany .",
         "dr": "the doctor said the news report was one page ."}
QUERIES = ["what is the capital ?", "where is berlin ?"]


def _run(lm, retriever, tmp_path):
    return ctxleak.influence(lm, QUERIES, retriever=retriever, max_new_tokens=2,
                             min_new_tokens=0, control=False, progress=False,
                             output=str(tmp_path / "run")).records


def test_langchain_vector_store_retriever(llama_lm, tmp_path):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(page_content=text, metadata={"source": f"{k}.txt"}, id=k)
                         for k, text in TEXTS.items()])
    retriever = store.as_retriever(search_kwargs={"k": 2})
    records = _run(llama_lm, retriever, tmp_path)
    for query, record in zip(QUERIES, records):
        want = retriever.invoke(query)
        assert record["passage_ids"] == [d.id for d in want]
        assert record["passages"] == [d.page_content for d in want]
        assert record["passage_sources"] == [f"{d.id}.txt" for d in want]
        assert record["passage_ranks"] == [1, 2] and len(record["passage_influence"]) == 2


def test_llamaindex_summary_index_retriever(llama_lm, tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, SummaryIndex

    index = SummaryIndex.from_documents([Document(text=text, id_=f"doc-{k}")
                                         for k, text in TEXTS.items()])
    retriever = index.as_retriever()
    records = _run(llama_lm, retriever, tmp_path)
    want = retriever.retrieve(QUERIES[0])
    record = records[0]
    assert record["passage_ids"] == [n.node.node_id for n in want]  # the chunks
    assert record["passage_sources"] == [f"doc-{k}" for k in TEXTS]  # their documents
    assert record["passage_ranks"] == [1, 2, 3]
    assert record["passage_scores"] == [n.score for n in want]


def test_haystack_bm25_retriever(llama_lm, tmp_path):
    pytest.importorskip("haystack")
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(content=text, id=k, meta={"source": f"kb/{k}"})
                           for k, text in TEXTS.items()])
    retriever = InMemoryBM25Retriever(document_store=store, top_k=2)
    records = _run(llama_lm, retriever, tmp_path)
    for query, record in zip(QUERIES, records):
        want = retriever.run(query=query)["documents"]
        assert record["passage_ids"] == [d.id for d in want]
        assert record["passage_scores"] == pytest.approx([d.score for d in want])
        assert record["passage_sources"] == [f"kb/{d.id}" for d in want]
        assert record["passage_ranks"] == list(range(1, len(want) + 1))
