"""An OpenAI-compatible chat endpoint as a RAG app's answerer: the app (:class:`~.rag.RAGApp`)
retrieves, the endpoint writes the answer.

Two ways to hand it the retrieved documents:

* ``context="ctxleak"``: as ``ctxleak serve``'s marked context (``extra_body = {"ctxleak":
  {"documents": [{"id", "text"}, ...], ...}}``, docs/deploy-cid.md), the question alone as the
  user message. The proxy then decodes with CID over them, as ``ctxleak``'s settings say
  (``{"lambda": 0.5}``, ``{"epsilon": 2}`` for bounded CID), and charges its budget per document
  id. Sampled at T = 1 by default (the proxy's default; bounded CID needs T > 0).
* ``context="inline"``: inside the app's own chat messages (its ``{context}`` slot), for a plain
  endpoint; greedy (T = 0) by default.

Each question is sent with its own seed (:func:`~.model_answerer.question_seed`), so a sampled
answer does not depend on the batch. Each answer carries the claim ``ctxleak serve`` says it was
released under (its ``ctxleak`` field, :func:`~.endpoint.served_claim`), which the attacks set
beside their bound. The settings of :class:`~.endpoint.ChatEndpointTarget`
(key, concurrency, rate, timeout, retries) apply as they do there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.targets.base import OnAnswer, TargetAnswer
from ctxleak.targets.endpoint import ChatEndpointTarget, ChatRequest
from ctxleak.targets.model_answerer import question_seed
from ctxleak.targets.rag import RAGPrompt, fingerprint_of

CONTEXTS = ("ctxleak", "inline")


class EndpointAnswerer:
    """Answers through ``base_url``'s chat completions as ``model`` (see the module
    docstring); ``seeded``: send each question's seed (default: to an inline endpoint, not to
    ``ctxleak serve``, which draws a DP answer's noise itself and refuses a client's seed
    unless started with ``--audit-seeds``); ``settings``: :class:`~.endpoint.ChatEndpointTarget`'s
    keywords."""

    def __init__(self, base_url: str, model: str, *, context: str = "ctxleak",
                 ctxleak: Mapping[str, Any] | None = None, seed: int = 0,
                 temperature: float | None = None, seeded: bool | None = None,
                 **settings: Any) -> None:
        if context not in CONTEXTS:
            raise ConfigError(f"context must be one of {', '.join(CONTEXTS)}, not {context!r}",
                              param="context")
        if ctxleak and context != "ctxleak":
            raise ConfigError("ctxleak settings go to ctxleak serve: they need "
                              "context='ctxleak'", param="ctxleak")
        if ctxleak and "documents" in ctxleak:
            raise ConfigError("ctxleak: the documents are the app's retrieved ones; give only "
                              "the decoding settings ('lambda', 'epsilon')", param="ctxleak")
        if temperature is None:
            temperature = 1.0 if context == "ctxleak" else 0.0
        self.context, self.seed = context, seed
        # ctxleak serve draws a DP answer's noise from its own secret and refuses a client's
        # seed (unless started with --audit-seeds): by default none is sent to it
        self.seeded = context == "inline" if seeded is None else bool(seeded)
        self.settings = dict(ctxleak or {})
        self.endpoint = ChatEndpointTarget(base_url, model, temperature=temperature, **settings)

    def request(self, prompt: RAGPrompt) -> ChatRequest:
        """The chat request of one prompt."""
        seed = question_seed(self.seed, prompt.query) if self.seeded else None
        if self.context == "inline":
            return ChatRequest(tuple(prompt.filled()), seed=seed, label=prompt.query)
        head = ({"role": "system", "content": self.endpoint.system},) \
            if self.endpoint.system else ()
        docs = [{"id": d.id, "text": d.text} for d in prompt.documents]
        return ChatRequest((*head, {"role": "user", "content": prompt.query}),
                           extra_body={"ctxleak": {**self.settings, "documents": docs}},
                           seed=seed, label=prompt.query)

    reports_answers = True

    def answer(self, prompts: Sequence[RAGPrompt], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        """One answer per prompt, each with the claim ``ctxleak serve`` says it was released
        under (:func:`~.endpoint.served_claim`; None from a plain endpoint)."""
        return self.endpoint.answers([self.request(p) for p in prompts], on_answer)

    def describe(self) -> str:
        if self.context == "inline":
            return f"{self.endpoint.describe()} (documents inline in the app's prompt)"
        how = ", ".join(f"{k} {v}" for k, v in sorted(self.settings.items())) or "its defaults"
        return f"{self.endpoint.describe()} (documents as ctxleak serve's context, {how})"

    def fingerprint(self) -> str:
        return "endpoint-answerer:" + fingerprint_of(self.endpoint.fingerprint(), self.context,
                                                     self.settings, self.seed, self.seeded)


__all__ = ["CONTEXTS", "EndpointAnswerer"]
