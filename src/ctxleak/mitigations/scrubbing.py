"""PII scrubbing: the retrieved documents with their personal data and secrets replaced, removed
or masked before they reach the prompt, then plain decoding.

What most RAG teams deploy first, as LangChain, Haystack and LlamaIndex integrate it: Microsoft
Presidio's anonymizer (``presidio-anonymizer``) applies one of its operators to every span a
detector finds. The spans come from the one detection layer of ctxleak
(:func:`ctxleak.sensitive.find_sensitive`: Presidio's analyzer with spaCy, detect-secrets and
ctxleak's own patterns), the same spans the audit's PII and secret columns report and
``--redact`` masks, so what scrubbing hides and what the audit counts as leaked are judged by
the same detectors. The operators (:data:`OPERATORS`), on ``Reviewer: Ines Okafor``:

- ``replace``: ``Reviewer: <PERSON>`` (the span's type in capitals between angle brackets);
- ``redact``: ``Reviewer: `` (the span removed);
- ``mask``: ``Reviewer: ***********`` (every character of the span a ``*``).

The response is then drawn from the prompt holding the scrubbed documents, as plain decoding
does: Context Influence Decoding at λ = 1 (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.4), whose mixture is the distribution given the context
alone, through CID's mechanism (:meth:`~ctxleak.mitigations.cid.CID.answer`: batched, seeded
per request).

Scrubbing gives no differential-privacy guarantee (``Claim(eps=None, relation="none")``) and
pays no budget: whatever the detectors miss (a fact that is no one's name or number, a secret
written in words, a value the model recovers from its surroundings) reaches the prompt as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, ClassVar

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    Mechanism,
    MechanismAnswer,
)
from ctxleak.sensitive import SENSITIVE_TYPES, find_sensitive
from ctxleak.sensitive.detect import Span

#: The Presidio operators scrubbing takes, and what each does to a found span.
OPERATORS: Mapping[str, str] = {
    "replace": "each found value becomes its type in capitals between angle brackets "
               "(<PERSON>, <EMAIL>)",
    "redact": "each found value is removed",
    "mask": "each character of a found value becomes '*'",
}
#: The character ``mask`` writes.
MASK_CHAR = "*"

#: A detector: a text -> the spans of personal data or secrets in it (``type``, ``start``,
#: ``end``, ``score``), as :func:`ctxleak.sensitive.find_sensitive` returns them.
Detector = Callable[[str], Sequence[Span]]


@dataclass(frozen=True)
class Scrubbing(Mechanism):
    """Presidio scrubbing of the documents, then plain decoding (the module docstring).

    ``operator``: one of :data:`OPERATORS`; ``entities``: the types to scrub (of
    :data:`~ctxleak.sensitive.SENSITIVE_TYPES`, a sequence or one string joined by ``+``,
    e.g. ``"email+phone"``), None for every type the detector finds; ``detect``: the detector
    (:func:`~ctxleak.sensitive.find_sensitive` by default)."""

    operator: str = "replace"
    entities: Sequence[str] | None = None
    detect: Detector = field(default=find_sensitive, repr=False)

    name: ClassVar[str] = "scrub"
    min_documents: ClassVar[int] = 1

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ConfigError(f"operator: '{self.operator}' is not a Presidio operator scrubbing "
                              f"takes: use {', '.join(OPERATORS)}", param="operator")
        if self.entities is not None:
            object.__setattr__(self, "entities", _entity_types(self.entities))
        if not callable(self.detect):
            raise ConfigError(f"detect: {self.detect!r} is not a function from a text to its "
                              "spans", param="detect")

    def key(self) -> str:
        """``scrub(operator=replace)``, with ``entities=email+phone`` where limited and the
        detector's name where it is not ctxleak's."""
        entities = "" if self.entities is None else f",entities={'+'.join(self.entities)}"
        detect = "" if self.detect is find_sensitive else \
            f",detect={getattr(self.detect, '__qualname__', type(self.detect).__name__)}"
        return f"{self.name}(operator={self.operator}{entities}{detect})"

    def spans(self, text: str) -> list[Span]:
        """The spans of ``text`` this scrubbing replaces: the detector's, of the chosen types,
        inside the text and not empty."""
        return [s for s in self.detect(text)
                if 0 <= s.start < s.end <= len(text)
                and (self.entities is None or s.type in self.entities)]

    def scrub(self, text: str) -> str:
        """``text`` with every span of :meth:`spans` put through the operator."""
        spans = tuple((s.type, s.start, s.end, float(s.score)) for s in self.spans(text))
        return _anonymized(text, spans, self.operator) if spans else text

    def claim(self, decoding: Decoding) -> Claim:
        """No guarantee: a value the detector misses reaches the prompt as it is."""
        return Claim(eps=None)

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        """One response per request, plain decoding (Context Influence Decoding at λ = 1) of
        the prompt holding its scrubbed documents (every one reaches it), seeded by the
        request's own seed: CID's answer (no claim, no token paid), each step's record its
        token and log-probabilities given the scrubbed documents and without them (at the
        temperature), without CID's λ."""
        scrubbed = [replace(r, documents=tuple(self.scrub(d) for d in r.documents))
                    for r in requests]
        return [replace(a, steps=tuple({k: v for k, v in s.items() if k != "lam"}
                                       for s in a.steps))
                for a in CID(1.0).answer(lm, scrubbed, decoding)]


def _entity_types(entities: Any) -> tuple[str, ...]:
    """``entities`` as a tuple of known types (a string joined by ``+``, or a sequence);
    :class:`ConfigError` naming the unknown ones, or for none at all."""
    names = entities.split("+") if isinstance(entities, str) else list(entities)
    names = [str(n).strip() for n in names]
    unknown = [n for n in names if n not in SENSITIVE_TYPES]
    if unknown:
        raise ConfigError(f"entities: {', '.join(repr(n) for n in unknown)} is not a type the "
                          f"detectors give: use {', '.join(SENSITIVE_TYPES)}", param="entities")
    if not names:
        raise ConfigError("entities: no type given: leave it out (None) to scrub every type",
                          param="entities")
    return tuple(dict.fromkeys(names))


@lru_cache(maxsize=8192)
def _anonymized(text: str, spans: tuple[tuple[str, int, int, float], ...], operator: str
                ) -> str:
    """Presidio's anonymizer over ``spans`` ((type, start, end, score)) with ``operator``
    (cached: a datastore's documents come back question after question)."""
    from presidio_anonymizer.entities import OperatorConfig, RecognizerResult

    params: dict[str, Any] = {}
    if operator == "mask":
        params = {"masking_char": MASK_CHAR, "chars_to_mask": len(text), "from_end": False}
    results = [RecognizerResult(kind.upper(), start, end, score)
               for kind, start, end, score in spans]
    return str(_engine().anonymize(text=text, analyzer_results=results,
                                   operators={"DEFAULT": OperatorConfig(operator, params)}).text)


@lru_cache(maxsize=1)
def _engine() -> Any:
    """Presidio's anonymizer engine, built on first use (importing it takes seconds)."""
    from presidio_anonymizer import AnonymizerEngine

    return AnonymizerEngine()
