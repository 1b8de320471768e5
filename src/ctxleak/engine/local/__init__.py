"""The in-process backend: :class:`LM` (a transformers model in this process) and its loading
(:func:`load_local`; :func:`from_objects` for a model already built)."""

from ctxleak.engine.local.devices import resolve_device, resolve_dtype
from ctxleak.engine.local.load import eos_ids, files_fingerprint, from_objects, load_local
from ctxleak.engine.local.model import LM

__all__ = ["LM", "eos_ids", "files_fingerprint", "from_objects", "load_local", "resolve_device",
           "resolve_dtype"]
