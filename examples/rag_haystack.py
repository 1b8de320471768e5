"""Audit a Haystack RAG pipeline where it lives: the retriever component run for each query,
every document's leave-one-out influence on the answer measured (Def. 3.1 of "Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models", S = one document), with
the retriever's BM25 score beside it.

Run: python examples/rag_haystack.py   (needs pip install "ctxleak[rag]")
"""

from __future__ import annotations

import os

# Haystack sends anonymous usage telemetry by default; this audit stays offline
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack import Document  # noqa: E402
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402
from rag_documents import DOCUMENTS, QUERIES, show  # noqa: E402

import ctxleak  # noqa: E402

store = InMemoryDocumentStore()
store.write_documents([Document(content=text, id=doc_id, meta={"source": source})
                       for doc_id, source, text in DOCUMENTS])
retriever = InMemoryBM25Retriever(document_store=store, top_k=2)

result = ctxleak.influence("default", QUERIES, retriever=retriever, max_new_tokens=16,
                           temperature=0.3, progress=False)
show(result)
print("BM25 scores:", [r["passage_scores"] for r in result.records])
