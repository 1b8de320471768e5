"""The engine: the four model operations every ctxleak method is built on.

- :mod:`ctxleak.engine.models` loads a model and its tokenizer (``load_model``).
- :mod:`ctxleak.engine.prompts` turns template pieces into exact token ids.
- :mod:`ctxleak.engine.nexttoken` gives next-token log-probabilities for a batch of prompts.
- :mod:`ctxleak.engine.scoring` gives teacher-forced log-probabilities of a continuation under
  many prompt variants, reusing the KV cache of shared prefixes.
- :mod:`ctxleak.engine.generation` generates from several prompt streams combined step by step.
- :mod:`ctxleak.engine.gradients` gives gradients of next-token log-probabilities with respect to
  input embeddings.
"""
