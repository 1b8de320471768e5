"""Any mitigation mechanism (:class:`~ctxleak.mitigations.mechanisms.Mechanism`: a DP vote over
shards, DP-RAG, scrubbing) as a RAG app's answerer, so that the black-box attacks test what it
claims: an attack's ε lower bound above the mechanism's claimed ε exposes a mechanism that does
not decode as it says ("Privacy-Preserving Retrieval-Augmented Generation with Differential
Privacy", Koga, Wu and Chaudhuri; "RAG with Differential Privacy", Grislain).

Each question becomes one :class:`~ctxleak.mitigations.mechanisms.AnswerRequest`: the retrieved
documents' texts and ids in retrieval order, the prompt as a function of any subset of them
(the app's messages with those texts, joined by a blank line, as ``{context}``:
:func:`~.model_answerer.app_prompt_ids`), and the question's own seed
(:func:`~.model_answerer.question_seed`). The claims of the answers given are kept in
``claims``, in order, for a report to set beside the attack's bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxleak.engine.chat_prompt import Messages
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.mechanisms import AnswerRequest, Claim, Decoding, Mechanism
from ctxleak.targets.model_answerer import app_prompt_ids, question_seed
from ctxleak.targets.rag import SEPARATOR, RAGPrompt, fingerprint_of


@dataclass
class MechanismAnswerer:
    """Answers by ``mechanism`` on ``lm`` with ``decoding``'s settings (see the module)."""

    lm: LanguageModel
    mechanism: Mechanism
    decoding: Decoding = field(default_factory=Decoding)
    seed: int = 0
    claims: list[Claim] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._rendered: dict[Messages, str] = {}

    def request(self, prompt: RAGPrompt) -> AnswerRequest:
        """The mechanism's request for one prompt."""
        if len(prompt.documents) < self.mechanism.min_documents:
            raise ConfigError(f"{self.mechanism.key()} needs at least "
                              f"{self.mechanism.min_documents} documents per question, and "
                              f"{len(prompt.documents)} were retrieved for {prompt.query[:60]!r}:"
                              " give the RAG app a larger top_k", param="top_k")

        def ids(texts: Sequence[str]) -> list[int]:
            return app_prompt_ids(self.lm, prompt, SEPARATOR.join(texts), self._rendered)

        return AnswerRequest(documents=tuple(d.text for d in prompt.documents), prompt=ids,
                             seed=question_seed(self.seed, prompt.query),
                             ids=tuple(d.id for d in prompt.documents), query=prompt.query)

    def answer(self, prompts: Sequence[RAGPrompt]) -> list[str]:
        requests = [self.request(p) for p in prompts]
        answers = self.mechanism.decode(self.lm, requests, self.decoding)
        if len(answers) != len(requests):
            raise ConfigError(f"{self.mechanism.key()} gave {len(answers)} answers to "
                              f"{len(requests)} requests", param="mechanism")
        self.claims += [a.claim for a in answers]
        return [self.lm.decode(list(a.response_ids)) for a in answers]

    def describe(self) -> str:
        return f"{self.lm.info.name} through the mechanism {self.mechanism.key()}"

    def fingerprint(self) -> str:
        d = self.decoding
        return "mechanism:" + fingerprint_of(self.lm.info.to_dict(), self.lm.run_options(),
                                             self.mechanism.key(), [d.temperature,
                                             d.max_new_tokens, d.min_new_tokens], self.seed)


__all__ = ["MechanismAnswerer"]
