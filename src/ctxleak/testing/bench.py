"""What the conformance checks run on (:mod:`.checks`): the decoding, the trials' documents, a
small datastore with a canary document, and :class:`Bench`, the model and its requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.attacks.canary import CANARY_QUERY, CANARY_SENTENCE
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding, Mechanism
from ctxleak.mitigations.prompts import template_prompt

#: The audit's settings, fixed before any mechanism was checked (as the proxy's canary tests
#: fixed them for the digit copier): 24 trials, 4 tokens, canaries of 3 digits, a hit at 2.
TRIALS, TOKENS, DIGITS, THRESHOLD = 24, 4, 3, 2
DECODING = Decoding(temperature=0.8, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
#: The neighbouring documents of the trials (one holds the canary in the audit).
DOCUMENTS = [{"id": "d0", "context": "Customer file."},
             {"id": "d1", "context": "Billing record."}]
#: A datastore for the checks that answer over one (the canary's document added in one).
STORE = [("customer", "Customer file ."), ("billing", "Billing record ."),
         ("customer-account", "Customer record of the account ."),
         ("billing-account", "Billing file of the account ."),
         ("both", "Customer Billing record .")]
CANARY = "472"


class CheckFailed(AssertionError):
    """A mechanism failed a check: the message says which and why, in one line."""


@dataclass
class Bench:
    """What the checks run on: the model and the decoding settings."""

    lm: LanguageModel
    decoding: Decoding = DECODING

    def prompt(self) -> Callable[[Any], list[int]]:
        return template_prompt(self.lm, CANARY_QUERY, reserve=self.decoding.max_new_tokens)

    def request(self, mechanism: Mechanism, seed: int, text: str = "Customer file .",
                datastore: Datastore | None = None) -> AnswerRequest:
        """A request the mechanism can answer: over ``datastore``, or ``text`` as every one of
        the documents the mechanism needs."""
        copies = max(1, mechanism.documents_needed())
        if datastore is not None:
            return AnswerRequest(documents=(), prompt=self.prompt(), seed=seed,
                                 query=CANARY_QUERY, datastore=datastore)
        return AnswerRequest(documents=(text,) * copies, prompt=self.prompt(), seed=seed,
                             ids=tuple(f"doc-{i}" for i in range(copies)), query=CANARY_QUERY)


def fail(message: str) -> CheckFailed:
    return CheckFailed(" ".join(message.split()))


def datastore_for(mechanism: Mechanism, with_canary: bool) -> Datastore:
    docs = list(STORE)
    while len(docs) < mechanism.documents_needed() + 1:  # a vote needs a document per shard
        docs.append((f"filler-{len(docs)}", "Billing file ."))
    if with_canary:
        docs.append(("canary", CANARY_SENTENCE.format(canary=CANARY)))
    return Datastore.of(docs)


