"""Kernels: the arithmetic of Context Influence Decoding (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4; bounded CID: App. B, Alg. 1) on tensors,
with torch as their only dependency.

- :mod:`ctxleak.kernels.cid`: the mixture ``log p̄_λ``, bounded CID's λ_t search (one row or
  many at once), the masked-logit constant and the one check of λ, T and ε;
- :mod:`ctxleak.kernels.draw`: the seeded draw of a token from a distribution.

The contract: nothing here imports the rest of ctxleak or any package but torch (held by the
import-linter contract "Kernels import only torch" in pyproject.toml and by
``tests/kernels/test_kernel_imports.py``), so that code running where ctxleak's heavy layers
cannot (a vLLM server's logits processor) shares these numbers exactly. Every caller in
ctxleak (in-process CID, n-gram scoring, the transformers logits processor, the privacy proxy)
uses these functions: to change the arithmetic, change it here, once.
"""
