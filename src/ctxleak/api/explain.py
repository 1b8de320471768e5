"""``ctxleak.influence_explain``: one prompt explained, the response by Context Influence
Decoding and the context tokens and n-grams that shaped it ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", Table 1)."""

from __future__ import annotations

from typing import cast

from typing_extensions import Unpack

from ctxleak.api.docs import MODEL_DOC, documented
from ctxleak.api.running import Bound, RunKeywords, keywords, run_method, run_options
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.explain import ExplainMethod
from ctxleak.results import ExplainResult

#: The keywords of :func:`influence_explain` besides the run options (``**run``).
EXPLAIN_DOCS = {
    "model": MODEL_DOC,
    "context": "The context text.",
    "query": "The query (empty for summarisation).",
    "task": "qa, summarization or custom.",
    "template": "Prompt template with {context} and {query}.",
    "lambda_": "Context influence level λ >= 0 (one value; ``lam`` before, deprecated).",
    "temperature": "Sampling temperature > 0.",
    "max_new_tokens": "Most new tokens of the response.",
    "min_new_tokens": "EOS is masked before this many tokens (default: 10, or "
                      "``max_new_tokens`` if smaller).",
    "ngram": "Window size of the top n-grams listed.",
    "top": "How many top n-grams to list.",
}


@documented(EXPLAIN_DOCS,
            '``summary["curve"]`` holds the influence of each ``ngram``-window (for the plot); '
            "its run directory has ``samples.jsonl``, ``results.json`` and ``report.html``. "
            "None on the other processes of a data-parallel launch.")
@keywords
def influence_explain(bound: Bound, /, model: str | LanguageModel = "default", context: str = "",
                      query: str = "", *,
                      task: str = "qa", template: str | None = None, lambda_: float = 1.0,
                      temperature: float = 0.8, max_new_tokens: int = 50,
                      min_new_tokens: int | None = None, ngram: int = 4, top: int = 5,
                      **run: Unpack[RunKeywords]) -> ExplainResult | None:
    """One prompt explained ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
    Language Models", Table 1): ``ctxleak influence explain``. The response by CID, the
    uni-gram influence of each context token on its first token, and the ``top`` context
    ``ngram``-grams by influence on the whole response.
    """
    common, lm = run_options(model, bound)
    try:
        method = ExplainMethod(common, context=context, query=query, task=task,
                               template=template, lam=lambda_, temperature=temperature,
                               max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                               ngram=ngram, top=top)
    except ConfigError as exc:  # CID's λ is ``lam``; this function's keyword is lambda_
        if exc.param != "lam":
            raise
        raise ConfigError(str(exc).replace("lam", "lambda_", 1), param="lambda_") from None
    return cast("ExplainResult | None", run_method(method, lm, None, progress=False))
