"""One prompt explained (Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models, Table 1): the CID response, the uni-gram influence of each context token on the first
response token, and the context n-grams (stride 1) with the most influence on the whole response
(Def. 3.1-3.2). :class:`ExplainMethod` makes it a one-item Method, run by
:func:`ctxleak.run.run_method` like every other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.ngrams import (
    next_token_unigram_influence,
    window_influence,
    windows,
)
from ctxleak.mitigations.cid import CID, CIDConfig
from ctxleak.mitigations.ledger import RowLedger
from ctxleak.mitigations.mechanisms import AnswerRequest, Decoding
from ctxleak.mitigations.prompts import TASK_TEMPLATES, document_parts
from ctxleak.run.method import ItemIds, Method, Plan
from ctxleak.run.options import RunOptions
from ctxleak.run.records import read_text_file
from ctxleak.run.validate import check_limit, check_template

#: The prompt formats of ``task`` (Fig. 5-6, and a user template).
EXPLAIN_TASKS = ("qa", "summarization", "custom")


def explain_inputs(context: str, task: str, template: str | None, ngram: int = 4,
                   top: int = 5) -> str:
    """The context text (``@FILE`` reads a file), checked before any model is loaded."""
    check_limit(ngram, "ngram")
    check_limit(top, "top")
    check_template(template, "template", ("context", "query"), required=("context",))
    if context.startswith("@"):
        context = read_text_file(context[1:])
    if not context.strip():
        raise ConfigError("context is empty", param="context")
    if task not in EXPLAIN_TASKS:
        raise ConfigError(f"unknown task '{task}': use {', '.join(EXPLAIN_TASKS)}", param="task")
    if task == "custom" and not template:
        raise ConfigError("task custom needs template", param="task")
    return context


def explain_prompt(lm: LanguageModel, context: str, query: str, *, task: str = "qa",
                   template: str | None = None, config: tuple[CID, Decoding], ngram: int = 4, top: int = 5,
                   seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ``results.json`` summary of one explained prompt, the per-window curve for its plot).

    ``config``: CID and its decoding (:func:`CIDConfig`). The summary holds the response and
    its ids, the response influence and its per-token values, the uni-gram influence of each
    context token on the first response token, the context tokens and the ``top`` n-grams by
    influence."""
    parts, dropped = document_parts(lm, (context,), query, template or TASK_TEMPLATES[task],
                                    reserve=config[1].max_new_tokens)
    cid, decoding = config
    request = AnswerRequest((context,), parts.prompt_of((context,)), derive_seed(seed, 0))
    [answer] = cid.answer(lm, [request], decoding)
    response = cast(RowLedger, answer.ledger)  # CID's answers carry their ledger
    if not response.response_ids:
        raise ConfigError("the model ended its response at once: raise min_new_tokens or try "
                          "another seed", param="min_new_tokens")
    first = response.response_ids[0]
    unigram = next_token_unigram_influence(lm, parts, [], first, lam=cid.lam,
                                           temperature=decoding.temperature,
                                           min_new_tokens=decoding.min_new_tokens)
    n = min(ngram, len(parts.context))
    spans = windows(len(parts.context), n, stride=1)
    win = window_influence(lm, parts, response.response_ids, spans, lam=cid.lam,
                           temperature=decoding.temperature,
                           min_new_tokens=decoding.min_new_tokens)
    order = np.argsort(-win.per_window)[:top]
    top_rows = [{"rank": k + 1, "tokens": f"{spans[i][0]}-{spans[i][1]}",
                 "n-gram": lm.decode(list(parts.context[spans[i][0]:spans[i][1]])),
                 "influence": float(win.per_window[i])} for k, i in enumerate(order)]
    summary = {"response": lm.decode(response.response_ids), "response_ids": response.response_ids,
               "response_tokens": lm.token_strings(response.response_ids),
               "first_token": lm.decode([first]), "influence": response.influence,
               "token_influence": response.token_influence,
               "unigram_influence_on_first_token": unigram.tolist(),
               "context_tokens": lm.token_strings(list(parts.context)), "top_ngrams": top_rows,
               "context_truncated_by": dropped}
    curve = {"n": n, "starts": [float(a) for a, _ in spans],
             "per_window": win.per_window.tolist()}
    return summary, curve


class ExplainMethod(Method[str, None, None]):
    """``influence explain``: one item, the prompt (``context`` and ``query``); its record and
    the summary are the explanation of :func:`explain_prompt`, the per-window ``curve``
    (window size ``n``, window ``starts`` and ``per_window`` influence) included."""

    name = "influence-explain"
    desc = "explain"
    private = True

    def __init__(self, common: RunOptions | None = None, *, context: str = "", query: str = "",
                 task: str = "qa", template: str | None = None, lam: float = 1.0,
                 temperature: float = 0.8, max_new_tokens: int = 50,
                 min_new_tokens: int | None = None, ngram: int = 4, top: int = 5) -> None:
        super().__init__(common)
        if min_new_tokens is None:
            min_new_tokens = min(10, max_new_tokens)
        self.context = explain_inputs(context, task, template, ngram, top)
        self.query, self.task, self.template = query, task, template
        self.ngram, self.top, self.lam, self.temperature = ngram, top, lam, temperature
        self.cid = CIDConfig(lam=lam, temperature=temperature, max_new_tokens=max_new_tokens,
                             min_new_tokens=min_new_tokens)

    def plan(self, data: Any) -> Plan[str, None]:
        """One item, the prompt; the config names it in full."""
        return Plan(items=["explain"], state=None,
                    config={"context": self.context, "query": self.query, "task": self.task,
                            "template": self.template, "lambda": self.lam,
                            "temperature": self.temperature, "ngram": self.ngram})

    def ids(self, item: str) -> ItemIds:
        return ItemIds(item, item)

    def measure(self, lm: LanguageModel, ready: None,
                items: Sequence[str]) -> list[dict[str, Any]]:
        summary, curve = explain_prompt(lm, self.context, self.query, task=self.task,
                                        template=self.template, config=self.cid,
                                        ngram=self.ngram, top=self.top, seed=self.common.seed)
        return [{**summary, "curve": curve} for _ in items]

    def summarize(self, ready: None, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The one prompt's explanation (its record without the id)."""
        return {k: v for k, v in records[0].items() if k != "id"}
