"""The fields of one influence record (Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.1-3.2): the response and its tokens, regurgitation and
ROUGE-L, utility against the references, the n-gram windows' and the passages' influence."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.influence.control import (
    context_token_kinds,
    per_token_fields,
)
from ctxleak.methods.influence.data import InfluenceExample
from ctxleak.methods.influence.metrics import (
    context_token_fraction,
    is_repeat,
    is_rouge_repeat,
)
from ctxleak.methods.influence.ngrams import (
    PromptParts,
    WindowInfluence,
    WindowRequest,
)
from ctxleak.methods.influence.setting import InfluenceOptions, Setting, round_floats
from ctxleak.methods.rag.app_prompt import prompt_fields
from ctxleak.methods.rag.copying import copied_spans
from ctxleak.methods.rag.documents import document_fields
from ctxleak.methods.tradeoff.utility import reference_scores, rouge_l_f1
from ctxleak.mitigations.ledger import RowLedger


def passage_fields(example: InfluenceExample, spans: Sequence[tuple[int, int] | None],
                   values: Any) -> dict[str, Any]:
    """The passage fields of a record: each passage's text, token span and influence
    (Def. 3.1-3.2 with S = the passage, nats; None for a passage cut out of the context), and
    the most influential one (``max_passage`` its number from 1, ``max_passage_id`` its name);
    the documents' ids, sources, ranks and scores
    (:func:`ctxleak.methods.rag.documents.document_fields`)."""
    it = iter(round_floats(values))
    influence = [None if s is None else next(it) for s in spans]
    known = [(v, j) for j, v in enumerate(influence) if v is not None]
    top = max(known, key=lambda p: (p[0], -p[1])) if known else None
    return {"passages": example.passage_texts,
            "passage_spans": [None if s is None else list(s) for s in spans],
            "passage_influence": influence,
            "max_passage": top[1] + 1 if top else None,
            "max_passage_influence": top[0] if top else None,
            **document_fields(example.documents, len(spans), top[1] if top else None)}


def add_passage_fields(record: dict[str, Any], example: InfluenceExample,
                       spans: Sequence[tuple[int, int] | None], win: Any, n_windows: int
                       ) -> dict[int, np.ndarray]:
    """Add the passage fields (the scoring's rows after its first ``n_windows``) and what the
    answer copied from each passage to ``record``; each kept passage's leave-one-out row,
    log p̄_λ(y_t | D∖j), by passage j."""
    record.update(passage_fields(example, spans, win.per_window[n_windows:]))
    answer = example.response if example.response is not None else record["response"]
    record["copied"] = copied_spans(record["passages"], record["passage_ids"], answer,
                                    example.query)
    kept = [j for j, s in enumerate(spans) if s is not None]
    return {j: np.asarray(win.logp_ablated[n_windows + i], dtype=np.float64)
            for i, j in enumerate(kept)}


def add_token_fields(records: list[dict[str, Any]], parts: Sequence[tuple[PromptParts, int]],
                     responses: Sequence[RowLedger]) -> None:
    """Per-token units and the tokens of the context the response carries: those the model
    already knew (little influence) and those copied with much (:mod:`.control`)."""
    for record, (p, _), response in zip(records, parts, responses):
        record.update(per_token_fields(record["influence"], len(response.response_ids)))
        record.update(context_token_kinds(response.response_ids, p.context,
                                          record["token_influence"]))


def window_fields(request: WindowRequest, win: WindowInfluence, options: InfluenceOptions,
                  n_windows: int) -> dict[str, Any]:
    """The n-gram fields of a record: windows, per-window influence and log-probs, the max
    (the request's first ``n_windows`` spans; passages follow them)."""
    assert options.ngram is not None
    per_window = win.per_window[:n_windows]
    return {
        "ngram": min(options.ngram, len(request.parts.context)),
        "windows": [list(s) for s in request.spans[:n_windows]],
        "window_influence": round_floats(per_window),
        "window_logp": [round_floats(row) for row in win.logp_ablated[:n_windows]],
        "max_window_influence": float(per_window.max()) if len(per_window) else None,
        "max_window": int(per_window.argmax()) if len(per_window) else None,
    }


def response_record(lm: LanguageModel, example: InfluenceExample, setting: Setting,
                    options: InfluenceOptions, seed: int, parts: PromptParts, dropped: int,
                    response: RowLedger) -> dict[str, Any]:
    """The record of one CID response: tokens, per-token log-probs and influence (Def. 3.1-3.2),
    regurgitation and ROUGE-L, bounded-CID ε."""
    ids = response.response_ids
    text = lm.decode(ids)
    context_text = lm.decode(list(parts.context))
    record: dict[str, Any] = {
        "setting": setting.key, "lambda": setting.lam, "temperature": setting.temperature,
        "context_tokens": len(parts.context), "context_truncated_by": dropped,
        "seed": seed, "query": example.query, "fact": example.fact, "response": text,
        "response_source": example.response_source, **response.response_fields(digits=6),
        "context_token_fraction": context_token_fraction(ids, parts.context),
        "repeat": is_repeat(ids, parts.context, options.repeat_threshold),
        "rouge_context": rouge_l_f1(text, context_text),
        "rouge_repeat": is_rouge_repeat(text, context_text, options.rouge_threshold),
        # utility against the references: ROUGE-L, SQuAD's exact match and token F1
        **reference_scores(text, example.all_references),
        # the tokens as text, so that a loaded run draws its leak map without the model
        "context_token_strings": lm.token_strings(list(parts.context)),
        "response_token_strings": lm.token_strings(ids),
    }
    # bounded CID: eps, composed_eps are the guarantee (ε per released token, basic
    # composition, Thm B.1); the ex-post figures are about this context alone
    record.update(response.eps_fields(digits=6))
    record.update(prompt_fields(lm, example, setting.temperature))
    return record


def with_logprobs(response: RowLedger, logp_context: Iterable[float],
                  logp_empty: Iterable[float]) -> RowLedger:
    """``response`` with its response tokens' log-probabilities (and so their influence) taken
    from the example's own scoring passes; the stopping EOS's entry is kept as drawn."""
    entries = list(response.entries)
    for t, (lc, le) in enumerate(zip(logp_context, logp_empty)):
        entries[t] = replace(entries[t], logp_context=float(lc), logp_empty=float(le))
    return replace(response, entries=tuple(entries))
