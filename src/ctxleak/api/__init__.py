"""The Python API: one function per method, each returning its typed Result
(:mod:`ctxleak.api.methods`, :mod:`ctxleak.api.explain`), and :func:`run_method` for any Method.

Every function takes the model and the data, then keywords only, under the CLI's names and
with the same meaning (:mod:`ctxleak.api.methods` says how).
"""

from __future__ import annotations

from ctxleak.api.canary import canary_audit
from ctxleak.api.explain import influence_explain
from ctxleak.api.methods import audit, iclinf, influence, probe, susceptibility
from ctxleak.api.retrieval import load_retriever, retrieve
from ctxleak.api.running import FACE, RENAMED, method_for, run_method, run_params

__all__ = ["FACE", "RENAMED", "audit", "canary_audit", "iclinf", "influence", "influence_explain",
           "load_retriever", "method_for", "probe", "retrieve", "run_method", "run_params",
           "susceptibility"]
