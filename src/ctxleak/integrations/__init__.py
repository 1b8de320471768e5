"""Context Influence Decoding for other libraries' generation loops (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4 and App. B):
:mod:`ctxleak.integrations.transformers` has ``ContextInfluenceProcessor`` (a
``transformers.LogitsProcessor`` with a privacy ledger), :mod:`ctxleak.integrations.generate` has
``cid_generate`` (CID through ``model.generate`` in one call) and :mod:`ctxleak.integrations.ledger`
turns a ledger into a result. The privacy proxy (``ctxleak serve``) from RAG frameworks:
:mod:`ctxleak.integrations.langchain` has ``CtxleakChat`` (a LangChain chat model that sends a
retriever's documents, with their classes) and :mod:`ctxleak.integrations.llamaindex` has
``CtxleakQueryEngine``. In evaluation frameworks: :mod:`ctxleak.integrations.phoenix` writes
influence back to Arize Phoenix as span annotations, :mod:`ctxleak.integrations.ragas` has
``ContextLeak`` (a ragas metric, in nats). Import those modules explicitly; this package imports
nothing heavy."""
