"""Objects with the attributes of LangChain, LlamaIndex and Haystack documents, for tests that
must not import the frameworks (ctxleak reads retrieved items by their attributes)."""

from __future__ import annotations


class LangChainDoc:
    """The attributes of ``langchain_core.documents.Document``."""

    def __init__(self, text, metadata=None, id=None):
        self.page_content, self.metadata, self.id = text, metadata or {}, id


class LlamaNode:
    """The attributes of a LlamaIndex ``TextNode``."""

    def __init__(self, text, node_id, ref_doc_id=None, metadata=None):
        self.text, self.node_id, self.ref_doc_id = text, node_id, ref_doc_id
        self.metadata = metadata or {}

    def get_content(self):
        return self.text


class NodeWithScore:
    """LlamaIndex's retrieved node and its score."""

    def __init__(self, node, score):
        self.node, self.score = node, score


class HaystackDoc:
    """The attributes of ``haystack.Document``."""

    def __init__(self, content, id, meta=None, score=None):
        self.content, self.id, self.meta, self.score = content, id, meta or {}, score
