"""Optional quality metrics that need a second model: BERTScore and FactKB (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models §4.1).

They run only when the user names a model (local or downloadable). When they cannot run, the
results file says ``null`` with the reason; they are never silently skipped.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def _unavailable(reason: str) -> dict[str, Any]:
    return {"value": None, "reason": reason}


def bertscore_f1(predictions: Sequence[str], references: Sequence[str],
                 model: str | None) -> dict[str, Any]:
    """Mean BERTScore F1 with the ``bert-score`` package and the named model."""
    if not model:
        return _unavailable("not requested: pass --bertscore-model MODEL (local dir or hub id)")
    pairs = [(p, r) for p, r in zip(predictions, references) if r]
    if not pairs:
        return _unavailable("no references in the data")
    try:
        from bert_score import score
    except ImportError:
        return _unavailable("the bert-score package is not installed: pip install bert-score")
    try:
        _, _, f1 = score([p for p, _ in pairs], [r for _, r in pairs], model_type=model,
                         num_layers=None, verbose=False)
    except Exception as exc:  # noqa: BLE001 - any failure becomes the recorded reason
        return _unavailable(f"BERTScore with '{model}' failed: {exc}")
    return {"value": float(f1.mean()), "model": model, "n": len(pairs)}


def factkb(predictions: Sequence[str], contexts: Sequence[str],
           model: str | None) -> dict[str, Any]:
    """Mean FactKB factuality: the probability of the 'factual' class of a sequence classifier
    given (summary, article), as FactKB defines it."""
    if not model:
        return _unavailable("not requested: pass --factkb-model MODEL (local dir or hub id)")
    try:
        tok, clf = _classifier(model)
        scores = []
        for pred, ctx in zip(predictions, contexts):
            enc = tok(pred, ctx, return_tensors="pt", truncation=True, max_length=512)
            with torch.no_grad():
                probs = torch.softmax(clf(**enc).logits[0].double(), -1)
            scores.append(float(probs[-1]))
    except Exception as exc:  # noqa: BLE001
        return _unavailable(f"FactKB with '{model}' could not run: {exc}")
    return {"value": sum(scores) / max(len(scores), 1), "model": model, "n": len(scores)}


@functools.lru_cache(maxsize=2)
def _classifier(model: str) -> tuple[Any, Any]:
    """FactKB's tokenizer and classifier, loaded once per run (every λ/T setting uses them)."""
    return (AutoTokenizer.from_pretrained(model),
            AutoModelForSequenceClassification.from_pretrained(model).eval())


def quality_scores(responses: Sequence[str], references: Sequence[str],
                   contexts: Sequence[str], bertscore_model: str | None,
                   factkb_model: str | None) -> dict[str, Any]:
    """BERTScore F1 against the references and FactKB against the contexts, for one setting's
    responses (Tables 2-3 report both per λ)."""
    return {"bertscore_f1": bertscore_f1(responses, references, bertscore_model),
            "factkb": factkb(responses, contexts, factkb_model)}
