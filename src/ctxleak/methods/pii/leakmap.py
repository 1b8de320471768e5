"""Where a subject's documents leaked into a probed answer (the in-context mode of "ProPILE:
Probing Privacy Leakage in Large Language Models" with the n-gram influence, Def. 3.1-3.2, of
"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models"): the
influence of each window of the documents on the teacher-forced target answer, spread over the
tokens it covers.

The prompt is rebuilt exactly as :func:`ctxleak.methods.pii.items.encode_item` builds it, with
the documents as the context slot; λ = 1 and T = 1, so the distributions are the model's own.
"""

from __future__ import annotations

from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import build_prompt
from ctxleak.methods.influence.leakmap import context_token_scores
from ctxleak.methods.influence.ngrams import PromptParts, window_influence, windows
from ctxleak.methods.pii.items import continuation_ids
from ctxleak.methods.pii.templates import scoring_pair


def in_context_map(lm: LanguageModel, row: dict[str, Any], documents: str, context_template: str, *,
                   chat: bool = False, ngram: int = 8) -> dict[str, Any] | None:
    """For one in-context probe row: the document tokens, the mean influence of the windows
    covering each (``ngram`` tokens, stride ``ngram // 2``), the target tokens and their
    influence. None when the documents encode to no tokens or the target is empty."""
    text, _ = scoring_pair(row["prompt"], row["target"])
    doc = lm.encode(documents)
    cut = int(row.get("context_truncated_tokens") or 0)
    if cut:
        doc = doc[:max(len(doc) - cut, 0)]
    target = continuation_ids(lm, text, row["target"])
    if not doc or not target:
        return None
    prompt = build_prompt(lm, context_template, {"document": doc, "prompt": text}, chat=chat)
    start, end = prompt.spans["document"]
    ids = list(prompt.ids)
    parts = PromptParts(tuple(ids[:start]), tuple(ids[start:end]), tuple(ids[end:]))
    n = min(ngram, len(doc))
    spans = windows(len(doc), n, max(1, n // 2))
    win = window_influence(lm, parts, target, spans, lam=1.0, temperature=1.0)
    return {"context_tokens": lm.token_strings(list(parts.context)),
            "scores": context_token_scores(len(doc), spans, win.per_window.tolist()),
            "target_tokens": lm.token_strings(target), "n": n, "windows": len(spans)}


__all__ = ["in_context_map"]
