"""Code that other programs load, outside ctxleak's stack: the vLLM plugin that decodes Context
Influence Decoding inside the server (:mod:`ctxleak.plugins.vllm_cid`, the logits processor;
:mod:`ctxleak.plugins.vllm_records`, the route that returns an answer's records), the book of
pairs it keeps (:mod:`ctxleak.plugins.cid_pairs`) and the wire protocol ctxleak's client and
the plugin share (:mod:`ctxleak.plugins.protocol`). They import torch, vLLM, Starlette and
ctxleak's kernels only, so that ``pip install --no-deps ctxleak`` into a server's environment
is enough."""
