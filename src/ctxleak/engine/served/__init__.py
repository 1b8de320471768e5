"""A model behind an OpenAI-compatible completions API: :func:`serve` connects, and the model
comes back as its wire dialect's :class:`ServedLM` (:mod:`~ctxleak.engine.served.base`: the
client, the checks and the operations; :mod:`~ctxleak.engine.served.vllm`: vLLM's extensions;
:mod:`~ctxleak.engine.served.openai`: a plain OpenAI-compatible server). docs/served-models.md
says how to add a serving engine.
"""

from ctxleak.engine.served.base import PROBE_TEXT, ServedInfo, ServedLM
from ctxleak.engine.served.connect import (
    DIALECTS,
    client_options,
    describe_server,
    serve,
    tokenizer_source,
)
from ctxleak.engine.served.openai import OpenAIServedLM
from ctxleak.engine.served.vllm import VLLMServedLM

__all__ = ["DIALECTS", "PROBE_TEXT", "OpenAIServedLM", "ServedInfo", "ServedLM", "VLLMServedLM",
           "client_options", "describe_server", "serve", "tokenizer_source"]
