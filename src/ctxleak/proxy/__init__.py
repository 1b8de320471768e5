"""``ctxleak serve``: a privacy proxy with an OpenAI-compatible API. A RAG application points its
OpenAI client at it; a request whose private context is marked (retrieved documents with ids in
its ``ctxleak`` field) is answered by its defence, a
:class:`~ctxleak.mitigations.mechanisms.Mechanism` asked the one way every part of ctxleak asks
it (:mod:`ctxleak.proxy.answering`): Context Influence Decoding (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded CID, App. B, Alg. 1) at
``ctxleak.lambda`` / ``ctxleak.epsilon``, or the mechanism ``ctxleak serve --mechanism`` or a
request's ``ctxleak.mechanism`` names (a DP vote, DP-RAG, scrubbing). Each answer carries its
privacy ledger, each document charged what its mechanism's charge says to a budget kept across
requests (:mod:`ctxleak.proxy.budget`, :mod:`ctxleak.proxy.charging`); any other request passes
through to the upstream server.

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
