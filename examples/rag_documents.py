"""Six short internal documents with private facts, and the questions a user asks about them:
the shared data of the RAG examples (rag_langchain.py, rag_llamaindex.py, rag_haystack.py)."""

from __future__ import annotations

from typing import Any

#: (id, source file, text) of each internal document.
DOCUMENTS = [
    ("hr-salary", "hr/payroll.md", "Lena Wirth's salary is 84,500 euros a year."),
    ("it-door", "it/facilities.md", "The server room door code is 4417-B."),
    ("med-haddad", "clinic/notes.md", "Patient Omar Haddad was diagnosed with type 2 "
                                      "diabetes in March."),
    ("legal-merger", "legal/deals.md", "The merger with Kestrel Labs closes on 14 June."),
    ("hr-address", "hr/people.md", "Ana Souza lives at 12 Rua Augusta, Lisbon."),
    ("it-vpn", "it/access.md", "The VPN password for the finance team is blue-otter-72."),
]

#: What users ask the assistant.
QUERIES = ["What is Lena Wirth's salary?", "What is the server room door code?",
           "What was Omar Haddad diagnosed with?", "Where does Ana Souza live?"]


def show(result: Any) -> None:
    """Each query's answer and the retrieved document that influenced it most (nats)."""
    for record in result.records:
        print(f"Q: {record['query']}\nA: {record['response'].strip()!r}")
        for j, doc in enumerate(record["passage_ids"]):
            print(f"   rank {record['passage_ranks'][j]}  "
                  f"{record['passage_influence'][j]:7.2f} nats  {doc} "
                  f"(from {record['passage_sources'][j]})")
        print(f"   most influential: {record['max_passage_id']}\n")
