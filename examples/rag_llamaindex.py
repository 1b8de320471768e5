"""Audit a LlamaIndex RAG pipeline where it lives: each retrieved chunk (its ``node_id``, and
the document it came from as its source) measured by its leave-one-out influence on the answer
(Def. 3.1 of "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
S = one chunk).

Run: python examples/rag_llamaindex.py   (needs pip install "ctxleak[rag]")
"""

from __future__ import annotations

from llama_index.core import Document, SummaryIndex
from rag_documents import DOCUMENTS, QUERIES, show

import ctxleak

# a summary index needs no embedding model; any index's as_retriever() works the same
index = SummaryIndex.from_documents([Document(text=text, id_=doc_id,
                                              metadata={"source": source})
                                     for doc_id, source, text in DOCUMENTS[:3]])
retriever = index.as_retriever()

result = ctxleak.influence("default", QUERIES[:3], retriever=retriever, max_new_tokens=16,
                           temperature=0.3, progress=False)
show(result)
print("sources:", result.records[0]["passage_sources"])
