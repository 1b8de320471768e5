"""The request the privacy proxy answers, once read (:mod:`ctxleak.proxy.request` reads it): its
marked :class:`Document` s and one :class:`ChatRequest` whatever defence answers it (Context
Influence Decoding, a DP vote, DP-RAG, scrubbing: a
:class:`~ctxleak.mitigations.mechanisms.Mechanism`), with its claim and charge kept per
mechanism and settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.mechanisms import Charge, Claim, Decoding, Mechanism, claim_of


@dataclass(frozen=True)
class Document:
    """A marked document: its id (the budget is kept per id), text and class (None: the one the
    ledger holds, else the default budget's; ``public``: never charged); ``public``: set by the
    proxy's charging, never by a client, for a document the operator's budgets make public (it
    goes in the prompt, not to the mechanism: :mod:`ctxleak.proxy.public`)."""

    id: str
    text: str
    cls: str | None = None
    public: bool = False


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """A request with marked context: its documents, the prompt text (every message) and the
    user's last message (``question``, the mechanism's query), the mechanism that answers it,
    temperature (None: greedy, a client's ``temperature: 0``), new-token limits, seed (None: a
    fresh one), ``stream``, the model name it gave, ``stream_options.include_usage`` (a last
    chunk with the usage), the datastore it is answered over (``documents`` are then its
    documents) and the app's chat messages its prompt is rendered from (None: the template);
    ``public_top_k``: over a datastore, the public documents retrieved into every prompt."""

    documents: tuple[Document, ...]
    query: str
    question: str
    mechanism: Mechanism
    temperature: float | None
    max_tokens: int
    min_tokens: int
    seed: int | None
    stream: bool
    model: str
    include_usage: bool = False
    datastore: Datastore | None = field(default=None, compare=False)
    messages: Any = None
    public_top_k: int = 2
    #: whether ``seed`` is the client's (an audit: the answer's noise is known to it) rather
    #: than the server's secret draw
    seed_known: bool = False

    @property
    def decoding(self) -> Decoding:
        """The mechanism's decoding settings: this request's temperature (greedy at 0) and
        new-token limits."""
        return Decoding(temperature=self.temperature or 1.0, max_new_tokens=self.max_tokens,
                        min_new_tokens=self.min_tokens, greedy=self.temperature is None)

    @cached_property
    def claim(self) -> Claim:
        """The most the mechanism's answer may spend at this request's settings."""
        return claim_of(self.mechanism, self.decoding)

    @cached_property
    def charge(self) -> Charge:
        """What the answer reserves of each private document and how it is charged."""
        return self.mechanism.charge(self.decoding)


__all__ = ["ChatRequest", "Document"]
