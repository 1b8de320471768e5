"""The requests the privacy proxy answers, once read (:mod:`ctxleak.proxy.request` reads
them): a marked :class:`Document`, what every request carries (:class:`ChatRequest`), one that
Context Influence Decoding answers (:class:`CIDRequest`) and one another defence answers
(:class:`MechanismRequest`), with its claim kept per mechanism and settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.mechanisms import Claim, Decoding, Mechanism


@dataclass(frozen=True)
class Document:
    """A marked document: its id (the budget is kept per id), text and class (None: the one the
    ledger holds, else the default budget's; ``public``: never charged)."""

    id: str
    text: str
    cls: str | None = None


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """What every request with marked context carries, whoever answers it: its documents, the
    prompt text (every message), temperature (None: greedy, a client's ``temperature: 0``),
    new-token limits, seed (None: a fresh one), ``stream``, the model name it gave and
    ``stream_options.include_usage`` (a last chunk with the usage)."""

    documents: tuple[Document, ...]
    query: str
    temperature: float | None
    max_tokens: int
    min_tokens: int
    seed: int | None
    stream: bool
    model: str
    include_usage: bool = False


@dataclass(frozen=True, kw_only=True)
class CIDRequest(ChatRequest):
    """A request answered by Context Influence Decoding: λ (the cap of bounded CID's λ_t) and ε
    per token (None: plain CID)."""

    lam: float
    eps: float | None


@dataclass(frozen=True, kw_only=True)
class MechanismRequest(ChatRequest):
    """A request answered by a defence other than Context Influence Decoding
    (:class:`~ctxleak.mitigations.mechanisms.Mechanism`: a DP vote, DP-RAG, scrubbing): the
    user's last message (``question``, the mechanism's query) and the mechanism; ``datastore``
    the datastore it answers over (``documents`` are then its documents, each charged) and
    ``messages`` the app's chat messages its prompt is rendered from (None: the template)."""

    question: str
    mechanism: Mechanism
    datastore: Datastore | None = field(default=None, compare=False)
    messages: Any = None

    @property
    def decoding(self) -> Decoding:
        """The mechanism's decoding settings: this request's temperature (greedy at 0) and
        new-token limits."""
        return Decoding(temperature=self.temperature or 1.0, max_new_tokens=self.max_tokens,
                        min_new_tokens=self.min_tokens, greedy=self.temperature is None)

    @cached_property
    def claim(self) -> Claim:
        """The most the mechanism's answer may spend at this request's settings (reserved
        before decoding)."""
        return claim_of(self.mechanism, self.decoding)


def claim_of(mechanism: Mechanism, decoding: Decoding) -> Claim:
    """``mechanism.claim(decoding)``, kept: a claim depends on the settings only (DP-RAG's
    bisection takes tens of milliseconds)."""
    try:
        hash(mechanism)
    except TypeError:  # a mechanism object that cannot be a key: asked each time
        return mechanism.claim(decoding)
    return _kept_claim(mechanism, decoding)  # type: ignore[arg-type]  # hashed above


@lru_cache(maxsize=256)
def _kept_claim(mechanism: Mechanism, decoding: Decoding) -> Claim:  # claim_of's cache
    return mechanism.claim(decoding)


def cid_settings(mechanism: Mechanism) -> tuple[float, float | None] | None:
    """CID's λ and ε per token where ``mechanism`` is Context Influence Decoding (answered by
    the proxy's CID path, which streams each token's ledger entry as it is drawn and charges
    bounded CID per token, as ``ctxleak.lambda``/``ctxleak.epsilon`` ask); None for any other
    mechanism (the one place the proxy tells CID from the other defences)."""
    if isinstance(mechanism, CID):
        return mechanism.lam, mechanism.bounded_eps
    return None


__all__ = ["CIDRequest", "ChatRequest", "Document", "MechanismRequest", "cid_settings",
           "claim_of"]
