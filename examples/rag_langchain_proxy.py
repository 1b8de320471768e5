"""A LangChain RAG app whose answers come from the privacy proxy: each question's retrieved
``Document`` s go to ``ctxleak serve`` as marked context, with their ids and classes
(``CtxleakChat``); the proxy answers with bounded Context Influence Decoding (ε per token,
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", App. B) and
charges each restricted document's budget, never the public one's. The app starts nothing itself.

Start the proxy on the default model, with the documents' classes and a ledger:

    ctxleak serve --model default --port 8100 --budget 16 \\
        --classes examples/rag_classes.jsonl --ledger sqlite:///ledger.db

then, in another shell (needs pip install "ctxleak[langchain,serve]"):

    python examples/rag_langchain_proxy.py        (CTXLEAK_PROXY_URL: another proxy)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever
from rag_documents import DOCUMENTS, QUERIES

from ctxleak.integrations.langchain import (
    FIELD,
    CtxleakChat,
    ctxleak_rag_chain,
    spent_by_document,
)

#: The operator's classes file (``ctxleak serve --classes``): the app labels its documents the same.
CLASSES = {row["id"]: row["class"] for row in map(json.loads, (
    Path(__file__).with_name("rag_classes.jsonl").read_text().splitlines()))}
#: A document anyone may read: class ``public``, used at full strength and never charged.
HELPDESK = ("it-helpdesk", "it/helpdesk.md", "The IT help desk is open 8 to 18 on weekdays.")


class KeywordRetriever(BaseRetriever):
    """The documents sharing most words with the query (offline; a vector store's
    ``as_retriever()`` is used the same way)."""

    documents: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: object) -> list[Document]:
        words = set(re.findall(r"\w+", query.lower()))
        return sorted(self.documents, key=lambda d: -len(
            words & set(re.findall(r"\w+", d.page_content.lower()))))[: self.k]


def main(base_url: str = "http://127.0.0.1:8100/v1", model: str = "default",
         epsilon: float = 0.1, max_tokens: int = 16, api_key: str = "none"
         ) -> list[BaseMessage]:
    """Ask every question through the proxy at ``base_url``; print each answer, what it spent
    and, at the end, ε spent per restricted document (what the proxy's ledger holds)."""
    retriever = KeywordRetriever(documents=[
        Document(page_content=text, id=doc_id,
                 metadata={"source": source, "class": CLASSES[doc_id]})
        for doc_id, source, text in [*DOCUMENTS, HELPDESK]])
    llm = CtxleakChat(base_url=base_url, api_key=api_key, model=model, epsilon=epsilon,
                      max_tokens=max_tokens, temperature=1.0)
    chain = ctxleak_rag_chain(retriever, llm)
    answers = []
    for question in [*QUERIES, "When is the IT help desk open?"]:
        answer = chain.invoke(question)
        field = answer.response_metadata[FIELD]
        print(f"Q: {question}\nA: {str(answer.content).strip()!r}\n"
              f"   ε spent {field['epsilon_spent']:.2f} on each private document of "
              f"{field['documents']} ({field['tokens']} tokens); dropped {field['dropped']}")
        answers.append(answer)
    print("\nε spent per restricted document:")
    for doc_id, eps in sorted(spent_by_document(answers).items()):
        print(f"   {doc_id:14s} {eps:6.2f}")
    return answers


if __name__ == "__main__":
    main(os.environ.get("CTXLEAK_PROXY_URL", "http://127.0.0.1:8100/v1"))
