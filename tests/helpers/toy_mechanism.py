"""A toy mechanism for tests (no privacy: it only claims one): it answers from its first ``k``
documents alone, sampled with the engine's seeded sampler, and claims ε per released token
under the "document" relation, every token paid. What the influence run does with a mechanism
is checked on it before the real ones are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ctxleak.engine.generation import sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    Mechanism,
    MechanismAnswer,
)
from ctxleak.mitigations.named import MECHANISMS


@dataclass(frozen=True)
class FirstDocuments(Mechanism):
    """Answers from the first ``k`` documents; claims ``eps`` per released token."""

    eps: float = 1.0
    k: int = 1
    label: str | None = None

    name: ClassVar[str] = "toy-first"
    min_documents: ClassVar[int] = 2

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ConfigError(f"eps: {self.eps} is not > 0", param="eps")
        if self.k < 1:
            raise ConfigError(f"k: {self.k} is not >= 1", param="k")

    def key(self) -> str:
        label = "" if self.label is None else f",label={self.label}"
        return f"{self.name}(eps={self.eps:g},k={self.k}{label})"

    def claim(self, decoding: Decoding) -> Claim:
        return Claim(self.eps * (decoding.max_new_tokens + 1), 0.0, "document")

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        prompts = [r.prompt(list(r.documents[:self.k])) for r in requests]
        drawn = sample(lm, prompts, [r.seed for r in requests],
                       temperature=decoding.temperature,
                       max_new_tokens=decoding.max_new_tokens,
                       min_new_tokens=decoding.min_new_tokens)
        out = []
        for r, (g,) in zip(requests, drawn):
            released = len(g.token_ids) + int(g.stopped_on_eos)
            out.append(MechanismAnswer(
                tuple(g.token_ids), g.stopped_on_eos, Claim(self.eps * released, 0.0, "document"),
                tokens_paid=released,
                steps=tuple({"token_id": int(t), "paid": True, "eps_step": self.eps}
                            for t in g.token_ids),
                documents_used=tuple(range(min(self.k, len(r.documents))))))
        return out


def register_toy() -> None:
    """Register :class:`FirstDocuments` as ``toy-first`` (once per process)."""
    if FirstDocuments.name not in MECHANISMS:
        MECHANISMS.add(FirstDocuments.name, FirstDocuments)
