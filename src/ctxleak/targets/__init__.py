"""What only answers questions: a RAG system audited from the outside, through the questions it
answers (an OpenAI-compatible chat endpoint, a chain, a query engine, a pipeline, a function, a
model with a mitigation).

:mod:`.base` states the interface; :mod:`.endpoint` is any OpenAI-compatible chat endpoint;
:mod:`.frameworks` a LangChain, LlamaIndex or Haystack system (:func:`~.frameworks.as_target`
makes any of them a target); :mod:`.rag` a RAG app the audit builds itself over a document list
(BM25, :mod:`.bm25`), answered by a ctxleak model (:mod:`.model_answerer`), a mitigation
mechanism (:mod:`.mechanism_answerer`) or an endpoint (:mod:`.endpoint_answerer`);
:mod:`.journal` keeps the answers a run has had (resume, a cap on queries) and estimates what a
run costs.
"""

from ctxleak.targets.base import FunctionTarget, Target, TargetAnswer, TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget
from ctxleak.targets.endpoint_answerer import EndpointAnswerer
from ctxleak.targets.frameworks import HaystackTarget, QueryEngineTarget, RunnableTarget, as_target
from ctxleak.targets.journal import AnswerJournal, JournaledTarget, estimate_cost
from ctxleak.targets.mechanism_answerer import MechanismAnswerer
from ctxleak.targets.model_answerer import ModelAnswerer
from ctxleak.targets.rag import Answerer, Document, RAGApp, RAGPrompt, demo_corpus, demo_rag

__all__ = ["AnswerJournal", "Answerer", "ChatEndpointTarget", "Document", "EndpointAnswerer",
           "FunctionTarget", "HaystackTarget", "JournaledTarget", "MechanismAnswerer",
           "ModelAnswerer", "QueryEngineTarget", "RAGApp", "RAGPrompt", "RunnableTarget",
           "Target", "TargetAnswer", "TargetError", "as_target", "demo_corpus", "demo_rag",
           "estimate_cost"]
