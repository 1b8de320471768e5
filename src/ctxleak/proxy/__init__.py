"""``ctxleak serve``: a privacy proxy with an OpenAI-compatible API. A RAG application points its
OpenAI client at it; a request whose private context is marked (retrieved documents with ids in
its ``ctxleak`` field) is decoded by Context Influence Decoding (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded CID, App. B, Alg. 1) and
answered with its privacy ledger, each document's ε charged to a budget kept across requests
(:mod:`ctxleak.proxy.budget`); any other request passes through to the upstream server. Another
defence (a DP vote, DP-RAG, scrubbing: ``ctxleak serve --mechanism``, a request's
``ctxleak.mechanism``) answers through the one
:class:`~ctxleak.mitigations.mechanisms.Mechanism` interface, each document charged the
answer's claim (:mod:`ctxleak.proxy.mechanism`).

:func:`create_app` builds the ASGI app, :func:`run_proxy` serves it. This package imports its
web and model parts lazily, so that :mod:`ctxleak.proxy.budget` can be imported alone."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "run_proxy", "ProxyConfig", "Budgets", "open_ledger"]

_WHERE = {"create_app": "ctxleak.proxy.app", "run_proxy": "ctxleak.proxy.app",
          "ProxyConfig": "ctxleak.proxy.config", "Budgets": "ctxleak.proxy.budget",
          "open_ledger": "ctxleak.proxy.budget"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'ctxleak.proxy' has no attribute {name!r}")
