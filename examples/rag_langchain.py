"""Audit a LangChain RAG pipeline where it lives: its retriever asked for each query, every
retrieved document's leave-one-out influence on the answer measured (Def. 3.1 of "Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models", S = one document).

Run: python examples/rag_langchain.py   (needs pip install "ctxleak[rag]")
"""

from __future__ import annotations

import re

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from rag_documents import DOCUMENTS, QUERIES, show

import ctxleak


class KeywordRetriever(BaseRetriever):
    """The documents sharing most words with the query (offline; a vector store's
    ``as_retriever()`` is audited the same way)."""

    documents: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: object) -> list[Document]:
        words = set(re.findall(r"\w+", query.lower()))
        return sorted(self.documents, key=lambda d: -len(
            words & set(re.findall(r"\w+", d.page_content.lower()))))[: self.k]


retriever = KeywordRetriever(documents=[
    Document(page_content=text, metadata={"source": source}, id=doc_id)
    for doc_id, source, text in DOCUMENTS])

result = ctxleak.influence("default", QUERIES, retriever=retriever, max_new_tokens=16,
                           temperature=0.3, progress=False)
show(result)
print(result.summary["verdict"]["text"])
