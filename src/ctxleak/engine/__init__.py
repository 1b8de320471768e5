"""The engine: the model operations every ctxleak method is built on, behind one interface.

- :mod:`ctxleak.engine.lm` is the interface, :class:`~ctxleak.engine.lm.LanguageModel`: a
  tokenizer, declared capabilities (:mod:`ctxleak.engine.capabilities`) and a few list-in,
  list-out operations.
- :mod:`ctxleak.engine.models` loads a model (``load_model``): in-process, or served at a URL
  (:mod:`ctxleak.engine.served`, one module per wire dialect).
- :mod:`ctxleak.engine.catalogue` names the models ctxleak knows; :mod:`ctxleak.engine.convert`
  turns a ``.gguf`` file into a folder transformers and vLLM read.
- :mod:`ctxleak.engine.prompts` turns template pieces into exact token ids.
- :mod:`ctxleak.engine.scoring` gives next-token log-probabilities of a batch of prompts and
  teacher-forced log-probabilities of a continuation under many prompt variants;
  :mod:`ctxleak.engine.generation` generates from several prompt streams combined step by step
  (:mod:`ctxleak.engine.streams`: the request and its step). Both are backend-free: they check
  their arguments and call the model's operations, which the in-process backend
  (:mod:`ctxleak.engine.local`: prefix-shared KV caches, batched decoding) and a served one
  (:mod:`ctxleak.engine.served`) implement.
- :mod:`ctxleak.engine.gradients` gives gradients of next-token log-probabilities with respect to
  input embeddings.
"""
