"""The in-process backend: :class:`LM` (a transformers model in this process) and its loading
(:func:`load_local`; :func:`from_objects` for a model already built). Its operations:
:mod:`~ctxleak.engine.local.scoring` and :mod:`~ctxleak.engine.local.generation`, with the
prompts' prefill (:mod:`~ctxleak.engine.local.prefill`) and a KV cache with room for the tokens
to come (:mod:`~ctxleak.engine.local.kvroom`)."""

from ctxleak.engine.local.devices import resolve_device, resolve_dtype
from ctxleak.engine.local.load import eos_ids, files_fingerprint, from_objects, load_local
from ctxleak.engine.local.model import LM

__all__ = ["LM", "eos_ids", "files_fingerprint", "from_objects", "load_local", "resolve_device",
           "resolve_dtype"]
