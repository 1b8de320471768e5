"""A ctxleak model as a RAG app's answerer: Context Influence Decoding of the app's prompt
("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.4;
bounded CID: App. B, Alg. 1), so that the black-box attacks measure the same model with and
without the mitigation.

Each answer mixes the prompt with the retrieved documents and the prompt without them
(:func:`~ctxleak.mitigations.cid.generate_cid_many`, all questions of a batch in one batched KV
cache, in process or through a served model). A model with a chat template (and its chat
template on) gets the app's messages rendered through it and tokenised whole
(:mod:`ctxleak.engine.chat_prompt`); without one, the messages' contents joined by a blank line
are the prompt, the retrieved documents its ``{context}`` slot
(:func:`~ctxleak.engine.prompts.build_prompt`: the prompt without them leaves the slot empty).
Each question draws from its own seed, derived from ``seed`` and the question's text, so an
answer does not depend on the batch, its order or a resumed run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxleak.engine.chat_prompt import Messages, has_chat_template, render_messages, whole_prompt
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import build_prompt
from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CIDConfig, CIDJob, generate_cid_many
from ctxleak.targets.rag import RAGPrompt, fingerprint_of


def question_seed(seed: int, question: str) -> int:
    """The seed of one question's answer: the first 4 bytes of SHA-256 of ``seed`` and the
    question, below 2^31."""
    digest = hashlib.sha256(f"{seed}\0{question}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def app_prompt_ids(lm: LanguageModel, prompt: RAGPrompt, context: str,
                   rendered: dict[Messages, str] | None = None) -> list[int]:
    """The token ids of ``prompt``'s messages with ``context`` as ``{context}`` (``""``: the
    prompt without retrieval), as the module docstring says; ``rendered``: a cache of the
    messages rendered through the chat template."""
    if lm.use_chat_template and has_chat_template(lm):
        cache = {} if rendered is None else rendered
        text = cache.get(prompt.messages)
        if text is None:
            text = cache[prompt.messages] = render_messages(lm, prompt.messages)
        whole = whole_prompt(lm, text, [context], prompt.query)
        return [*whole.before, *whole.context, *whole.after]
    template = "\n\n".join(content for _, content in prompt.messages) + "\n"
    return list(build_prompt(lm, template, {"context": context, "query": prompt.query},
                             chat=False).ids)


@dataclass
class ModelAnswerer:
    """Answers by CID on ``lm`` with ``cid`` (default: λ = 1, T = 0.8, 10 to 50 new tokens:
    the model reads its documents as a plain RAG app does); ``greedy`` takes the most likely
    token of the mixture at each step instead of sampling; ``batch_size`` questions are decoded
    together."""

    lm: LanguageModel
    cid: CIDConfig = field(default_factory=CIDConfig)
    seed: int = 0
    greedy: bool = False
    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, not {self.batch_size}",
                              param="batch_size")
        self._rendered: dict[Messages, str] = {}

    def prompt_ids(self, prompt: RAGPrompt) -> tuple[list[int], list[int]]:
        """The token ids of the prompt with the retrieved documents and without them."""
        return (app_prompt_ids(self.lm, prompt, prompt.context, self._rendered),
                app_prompt_ids(self.lm, prompt, "", self._rendered))

    def answer(self, prompts: Sequence[RAGPrompt]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start:start + self.batch_size]
            jobs: list[CIDJob] = []
            for p in chunk:
                full, empty = self.prompt_ids(p)
                jobs.append((full, empty, self.cid, question_seed(self.seed, p.query)))
            ledgers = generate_cid_many(self.lm, jobs, sample=not self.greedy)
            out += [self.lm.decode(ledger.response_ids) for ledger in ledgers]
        return out

    def _mode(self) -> str:
        cid = self.cid
        if cid.bounded_eps is not None:
            return f"bounded CID ε = {cid.bounded_eps:g} per token (λ ≤ {cid.lam:g})"
        return "plain decoding (CID λ = 1)" if cid.lam == 1 else f"CID λ = {cid.lam:g}"

    def describe(self) -> str:
        how = "greedy" if self.greedy else f"T = {self.cid.temperature:g}, seed {self.seed}"
        return f"{self.lm.info.name} by {self._mode()}, {how}"

    def fingerprint(self) -> str:
        cid = self.cid
        return "model:" + fingerprint_of(self.lm.info.to_dict(), self.lm.run_options(),
                                         self.lm.identity(),
                                         [cid.lam, cid.temperature, cid.max_new_tokens,
                                          cid.min_new_tokens, cid.bounded_eps],
                                         self.seed, self.greedy)


__all__ = ["ModelAnswerer", "question_seed"]
