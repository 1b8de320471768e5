"""A ctxleak model answering by Context Influence Decoding with a
:class:`~ctxleak.mitigations.cid.CID` and its decoding ("Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models", Def. 3.4; bounded CID: App. B, Alg. 1): the one
answerer (:class:`~.mechanism_answerer.MechanismAnswerer`) with CID as its mechanism."""

from __future__ import annotations

from dataclasses import replace

from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.mechanisms import Decoding
from ctxleak.targets.mechanism_answerer import MechanismAnswerer, question_seed


def ModelAnswerer(lm: LanguageModel, cid: tuple[CID, Decoding] | None = None,  # noqa: N802
                  seed: int = 0, greedy: bool = False, batch_size: int = 16) -> MechanismAnswerer:
    """Answers by CID on ``lm`` with ``cid``, the mechanism and its decoding
    (:func:`~ctxleak.mitigations.cid.CIDConfig`; default: λ = 1, T = 0.8, 10 to 50 new tokens:
    the model reads its documents as a plain RAG app does); ``greedy`` takes the most likely
    token of the mixture at each step instead of sampling; ``batch_size`` questions are
    decoded together."""
    mechanism, decoding = cid or CIDConfig()
    decoding = replace(decoding, greedy=greedy or decoding.greedy)
    return MechanismAnswerer(lm, mechanism, decoding, seed=seed, batch_size=batch_size)


__all__ = ["ModelAnswerer", "question_seed"]
