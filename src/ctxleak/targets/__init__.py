"""What only answers questions: a RAG system audited from the outside, through the questions it
answers (an OpenAI-compatible chat endpoint, a chain, a query engine, a pipeline, a function, a
model with a mitigation). :mod:`.base` states the interface; :mod:`.rag` is a RAG app the audit
builds itself over a document list (BM25, :mod:`.bm25`), answered by a ctxleak model
(:mod:`.model_answerer`) or an endpoint (:mod:`.endpoint_answerer`); :mod:`.endpoint` is any
OpenAI-compatible chat endpoint; :mod:`.journal` keeps the answers a run has had (resume, a cap
on queries) and estimates what a run costs."""

from ctxleak.targets.base import FunctionTarget, Target, TargetAnswer, TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget
from ctxleak.targets.endpoint_answerer import EndpointAnswerer
from ctxleak.targets.journal import AnswerJournal, JournaledTarget, estimate_cost
from ctxleak.targets.model_answerer import ModelAnswerer
from ctxleak.targets.rag import Answerer, Document, RAGApp, RAGPrompt, demo_corpus, demo_rag

__all__ = ["AnswerJournal", "Answerer", "ChatEndpointTarget", "Document", "EndpointAnswerer",
           "FunctionTarget", "JournaledTarget", "ModelAnswerer", "RAGApp", "RAGPrompt", "Target",
           "TargetAnswer", "TargetError", "demo_corpus", "demo_rag", "estimate_cost"]
