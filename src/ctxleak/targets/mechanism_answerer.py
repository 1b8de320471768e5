"""A ctxleak model behind any defence as a RAG app's answerer
(:class:`~ctxleak.mitigations.mechanisms.Mechanism`: Context Influence Decoding and its bounded
form, "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def.
3.4 and App. B; a DP vote over shards, "Privacy-Preserving Retrieval-Augmented Generation with
Differential Privacy", Koga, Wu and Chaudhuri; DP-RAG, "RAG with Differential Privacy",
Grislain; scrubbing), so that the black-box attacks measure the same model with and without a
mitigation, and test what each claims: an attack's ε lower bound above the claimed ε exposes a
mechanism that does not decode as it says.

Each question becomes one :class:`~ctxleak.mitigations.mechanisms.AnswerRequest`: the retrieved
documents' texts and ids in retrieval order, the prompt as a function of any subset of them
(the app's messages with those texts, joined by a blank line, as ``{context}``:
:func:`~ctxleak.mitigations.prompts.messages_prompt`), and the question's own seed
(:func:`question_seed`), derived from ``seed`` and the question's text, so an answer does not
depend on the batch, its order or a resumed run. The claims of the answers given are kept in
``claims``, in order, for a report to set beside the attack's bound.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxleak.engine.chat_prompt import Messages
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.mechanisms import AnswerRequest, Claim, Decoding, Mechanism
from ctxleak.mitigations.prompts import messages_prompt
from ctxleak.targets.rag import SEPARATOR, RAGPrompt, fingerprint_of


def question_seed(seed: int, question: str) -> int:
    """The seed of one question's answer: the first 4 bytes of SHA-256 of ``seed`` and the
    question, below 2^31."""
    digest = hashlib.sha256(f"{seed}\0{question}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass
class MechanismAnswerer:
    """Answers by ``mechanism`` on ``lm`` with ``decoding``'s settings (see the module);
    default: CID at λ = 1, T = 0.8, 10 to 50 new tokens (the model reads its documents as a
    plain RAG app does); ``batch_size`` questions are answered together."""

    lm: LanguageModel
    mechanism: Mechanism = field(default_factory=CID)
    decoding: Decoding = field(default_factory=Decoding)
    seed: int = 0
    batch_size: int = 16
    claims: list[Claim] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, not {self.batch_size}",
                              param="batch_size")
        self._rendered: dict[Messages, str] = {}

    def request(self, prompt: RAGPrompt) -> AnswerRequest:
        """The mechanism's request for one prompt."""
        if len(prompt.documents) < self.mechanism.min_documents:
            raise ConfigError(f"{self.mechanism.key()} needs at least "
                              f"{self.mechanism.min_documents} documents per question, and "
                              f"{len(prompt.documents)} were retrieved for {prompt.query[:60]!r}:"
                              " give the RAG app a larger top_k", param="top_k")
        return AnswerRequest(documents=tuple(d.text for d in prompt.documents),
                             prompt=messages_prompt(self.lm, prompt.messages, prompt.query,
                                                    SEPARATOR, self._rendered),
                             seed=question_seed(self.seed, prompt.query),
                             ids=tuple(d.id for d in prompt.documents), query=prompt.query)

    def prompt_ids(self, prompt: RAGPrompt) -> tuple[list[int], list[int]]:
        """The token ids of the prompt with the retrieved documents and without them."""
        request = self.request(prompt)
        return request.prompt(request.documents), request.prompt([])

    def answer(self, prompts: Sequence[RAGPrompt]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            requests = [self.request(p) for p in prompts[start:start + self.batch_size]]
            answers = self.mechanism.answer(self.lm, requests, self.decoding)
            if len(answers) != len(requests):
                raise ConfigError(f"{self.mechanism.key()} gave {len(answers)} answers to "
                                  f"{len(requests)} requests", param="mechanism")
            self.claims += [a.claim for a in answers]
            out += [self.lm.decode(list(a.response_ids)) for a in answers]
        return out

    def describe(self) -> str:
        d = self.decoding
        how = "greedy" if d.greedy else f"T = {d.temperature:g}, seed {self.seed}"
        return f"{self.lm.info.name} by {self.mechanism.describe()}, {how}"

    def fingerprint(self) -> str:
        d = self.decoding
        return "mechanism:" + fingerprint_of(self.lm.info.to_dict(), self.lm.run_options(),
                                             self.lm.identity(), self.mechanism.key(),
                                             [d.temperature, d.max_new_tokens,
                                              d.min_new_tokens], self.seed, d.greedy)


__all__ = ["MechanismAnswerer", "question_seed"]
