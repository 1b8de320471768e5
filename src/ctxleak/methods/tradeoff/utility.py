"""Answer utility against references: exact match and token F1 as SQuAD v1.1 defines them
("SQuAD: 100,000+ Questions for Machine Comprehension of Text", Rajpurkar et al., 2016), beside
ROUGE-L ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" §4.1
reports ROUGE-L, BERTScore and FactKB as the utility a mitigation costs).

Both answers are normalised first: lower-cased, punctuation removed, the articles *a*, *an* and
*the* removed as words, whitespace collapsed. Exact match is 1 when the normalised strings are
equal; token F1 is the harmonic mean of precision and recall of the tokens both share, counted
as multisets. Answer match is 1 when the normalised reference appears in the normalised answer
as whole words: a small model's answer restates the question before the fact ("Yusuf's new
salary will be 44,750 pounds"), which exact match scores 0 and F1 dilutes, so match is the QA
utility a frontier reads first. With several references, each score is the largest over them.
Written here from the paper's definitions (no evaluation script copied).

:func:`paired_difference` reads a mitigation's cost: the mean per-example difference between two
settings with a paired bootstrap interval (:func:`scipy.stats.bootstrap`).
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rouge_score import rouge_scorer

from ctxleak.methods.stats import bootstrap_ci

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 with the ``rouge-score`` package (offline; Porter stemming)."""
    scorer = _scorer()
    if not prediction.strip() or not reference.strip():
        return 0.0
    return float(scorer.score(reference, prediction)["rougeL"].fmeasure)


@functools.lru_cache(maxsize=1)
def _scorer() -> Any:
    """The ROUGE-L scorer, built once per process."""
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def exact_match(prediction: str, reference: str) -> float:
    """1.0 when the normalised answers are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def answer_match(prediction: str, reference: str) -> float:
    """1.0 when the normalised ``reference`` appears in the normalised ``prediction`` as whole
    words (a reference that normalises to nothing matches nothing), else 0.0."""
    ref = normalize_answer(reference)
    return float(bool(ref) and f" {ref} " in f" {normalize_answer(prediction)} ")


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the normalised answers' tokens, as multisets; 0 when they share no token (SQuAD
    v1.1: an answer that normalises to nothing, "The.", scores 0 even against another such)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def reference_scores(prediction: str, references: Sequence[str]) -> dict[str, float | None]:
    """A record's utility fields: ``rouge_l``, ``exact_match``, ``f1`` and ``match``
    (:func:`answer_match`), each the best over ``references``; all ``None`` when there is no
    reference."""
    refs = [r for r in references if r]
    if not refs:
        return {"rouge_l": None, "exact_match": None, "f1": None, "match": None}
    return {"rouge_l": max(rouge_l_f1(prediction, r) for r in refs),
            "exact_match": max(exact_match(prediction, r) for r in refs),
            "f1": max(token_f1(prediction, r) for r in refs),
            "match": max(answer_match(prediction, r) for r in refs)}


#: The per-record utility fields, as the summary and ``compare`` name them.
UTILITY_KEYS = ("f1", "exact_match", "rouge_l", "match")


def paired_difference(left: Sequence[dict[str, Any]], right: Sequence[dict[str, Any]],
                      key: str = "f1", *, level: float = 0.95, seed: int = 0
                      ) -> dict[str, Any]:
    """The mean difference left − right of a per-record ``key`` over the examples both sides
    scored (matched by ``id``), with the BCa bootstrap interval of the mean difference
    (:func:`~ctxleak.methods.stats.bootstrap_ci`; ``None`` with ``ci_reason`` below its n).
    E.g. the records at λ = 1 against those at λ = 0: the utility lowering λ costs."""
    right_by_id = {r["id"]: float(r[key]) for r in right if r.get(key) is not None}
    diffs = [float(r[key]) - right_by_id[r["id"]] for r in left
             if r.get(key) is not None and r["id"] in right_by_id]
    low, high, reason = bootstrap_ci(diffs, level=level, seed=seed)
    return {"quantity": key, "pairs": len(diffs),
            "mean_difference": sum(diffs) / len(diffs) if diffs else None,
            "ci_low": low, "ci_high": high, "ci_reason": reason,
            "excludes_zero": None if low is None or high is None else (low > 0 or high < 0)}


__all__ = ["UTILITY_KEYS", "exact_match", "normalize_answer", "paired_difference",
           "reference_scores", "rouge_l_f1", "token_f1"]
