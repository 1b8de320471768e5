"""What only answers questions: a RAG system audited from the outside, through the questions it
answers (an OpenAI-compatible chat endpoint, a chain, a query engine, a pipeline, a function, a
model with a mitigation). :mod:`.base` states the interface."""
