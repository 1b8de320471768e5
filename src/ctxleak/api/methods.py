"""The Python API: one function per method over a dataset, each returning its typed Result.

Every function takes the model and the data, then keywords only: the method's own parameters
(its options dataclass, e.g. :class:`ctxleak.methods.influence.params.InfluenceParams`) and the
run options (:class:`ctxleak.run.options.RunOptions`), under the CLI's names and with the same
meaning, so the CLI and the API write the same run directory. The method's parameters are
written out in each signature, the run options typed once (``**run: Unpack[RunKeywords]``), so
readers, IDEs and type checkers see every keyword; their documentation is the dataclasses' own
(:mod:`ctxleak.api.docs`). :func:`ctxleak.api.running.keywords` binds each call and hands it to
the function as its first argument; an unknown keyword raises
:class:`ctxleak.errors.ConfigError` with a did-you-mean.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from typing_extensions import Unpack

from ctxleak.api.docs import RETURNS_DOC, documented, method_docs
from ctxleak.api.running import Bound, RunKeywords, keywords, run_keywords
from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.audit.method import AuditParams
from ctxleak.methods.icl.params import ICLInfParams
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.pii.params import ProbeParams
from ctxleak.methods.rag.retrieval import retrieve
from ctxleak.methods.susceptibility.method import SusceptibilityParams
from ctxleak.results import (
    AuditResult,
    ICLInfResult,
    InfluenceResult,
    ProbeResult,
    SusceptibilityResult,
)

#: The ``retriever`` keyword of :func:`influence`.
RETRIEVER_DOC = ("A RAG pipeline's retriever (a LangChain retriever, a LlamaIndex retriever, a "
                 "Haystack retriever component, or a function query -> list of strings or "
                 "dicts): each query of ``data`` is retrieved and every document measured as a "
                 "passage (:func:`ctxleak.retrieve`). None: ``data`` holds the contexts.")

R = TypeVar("R")
A = ParamSpec("A")


def over_data(params_class: type, data: str, returns: str = RETURNS_DOC, **docs: str
              ) -> Callable[[Callable[Concatenate[Bound, A], R]], Callable[A, R]]:
    """An API function that runs ``params_class`` over a dataset: its calls bound
    (:func:`ctxleak.api.running.keywords`) and its docstring written (:func:`documented`) from
    ``params_class``, ``data`` (what its ``data`` takes), ``docs`` (its other keywords) and
    ``returns``."""

    def decorate(func: Callable[Concatenate[Bound, A], R]) -> Callable[A, R]:
        return documented({**method_docs(params_class, data), **docs}, returns)(keywords(func))

    return decorate


@over_data(InfluenceParams,
           'A JSONL/CSV/Parquet path with context, query and optional reference (a string or a '
           'list of acceptable answers) and id fields, ``demo``, ``demo-qa`` (questions answered '
           'only by their private document), a list of dicts, a pandas DataFrame or a '
           '``datasets.Dataset``; with ``retriever``, the queries (strings, or rows with query '
           'and optional id and reference).',
           RETURNS_DOC + ' Influence is in nats (natural logarithms), summed over the '
           "response's tokens, and read as the ε of ex-post per-instance DP (Def. 2.2 of "
           '"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models"): '
           'e^ε is how many times more likely the response is with the context than without. '
           '``summary["verdict"]`` says which examples leak beyond the control; '
           '``result.tokens()``, ``.windows()``, ``.passages()`` are tidy frames, '
           "``result.example(id).show()`` one example's leak map.",
           retriever=RETRIEVER_DOC)
def influence(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo", *,
              progress: bool = True, retriever: Any = None, task: str = "auto", template: str | None = None,
              fields: str | Mapping[str, str] | None = None,
              lambda_: float | Sequence[float] | str = 1.0,
              temperature: float | Sequence[float] | str | None = None, max_new_tokens: int = 50,
              min_new_tokens: int | None = None, ngram: int | str | None = "full",
              stride: int | None = None, context_sizes: int | Sequence[int] | str | None = None,
              bounded_eps: float | Sequence[float | None] | str | None = None,
              mechanisms: Any = None, datastore: Any = None, repeat_threshold: float = 0.5,
              rouge_threshold: float = 0.5, bertscore_model: str | None = None,
              factkb_model: str | None = None, redact: bool = False, control: bool = True,
              controls: int | None = None,
              passages: str | None = None, exposure_budget: float | None = None,
              log_format: str = "auto", class_field: str = "classification",
              class_budgets: Mapping[str, float] | str | None = None,
              document_budgets: Mapping[str, float] | str | None = None,
              prompt_messages: Any = None,
              system_prompt: str | None = None, app_prompt: bool | None = None,
              deployed_temperature: float | None = None,
              **run: Unpack[RunKeywords]) -> InfluenceResult:
    """Expected context influence of ``data`` under Context Influence Decoding ("Estimating
    Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.4):
    ``ctxleak influence``.
    """
    if retriever is not None:  # data gives the queries; each retrieved document a passage
        data = retrieve(retriever, data)
    return cast(InfluenceResult, run_keywords(InfluenceParams, {**bound, "data": data}))


@over_data(ICLInfParams, 'Labelled examples: ``demo``, ``hf:agnews|dbpedia|trec``, a JSONL/CSV '
                         'path or rows in memory.')
def iclinf(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo", *,
           progress: bool = True, test_data: Any = None, split: str = "split", text_field: str = "text",
           label_field: str = "label", labels: str | Sequence[str] | None = None,
           queries: int = 100, format: str = "auto", instruction: str | None = None,
           exemplar_template: str | None = None, query_template: str | None = None,
           max_text_tokens: int = 256, shots: int | Sequence[int] | str = "4",
           calibration: str | None = None, calibration_eps: float = 1e-06,
           output_space: str = "labels", label_scoring: str = "first-token",
           **run: Unpack[RunKeywords]) -> ICLInfResult:
    """ICLInf, the privacy loss of in-context exemplars ("Evaluating Privacy Leakage From In-Context Learning"
    §3-4, Eq. 4): ``ctxleak icl``.
    """
    return cast(ICLInfResult, run_keywords(ICLInfParams, bound))


@over_data(AuditParams, 'The private labelled examples: ``demo``, a JSONL/CSV path or rows in '
                        'memory.')
def audit(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo", *,
          progress: bool = True, text_field: str = "text", label_field: str = "label",
          target_eps: Any = "1,10,100",
          delta: Any = "1e-5", subset_size: int = 8, clip: float = 10.0, temperature: float = 2.0,
          sequences: int = 4, max_new_tokens: int = 24, min_new_tokens: int = 0,
          search: str = "temperature",
          orders: Any = "2-99", label: str = "Sports", template: str | None = None,
          **run: Unpack[RunKeywords]) -> AuditResult:
    """Audit DP synthetic-text generation: ε_empirical against each target ε ("Evaluating
    Privacy Leakage From In-Context Learning" §5, App. C): ``ctxleak audit``.
    """
    return cast(AuditResult, run_keywords(AuditParams, bound))


@over_data(SusceptibilityParams, 'A relations JSON file or ``demo``.')
def susceptibility(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo", *,
                   progress: bool = True, method: str = "both", contexts: int = 256,
                   entity_contexts: int | None = None,
                   top_k: int = 10, sigma2: float = 1.0, reference: str = "marginal",
                   query_types: str | Sequence[str] = "closed,open_qa,open_completion",
                   fisher_vocab: str = "topk", fisher_truncation: str = "renormalised",
                   context_entities: str = "mix", sampling: str = "no-replacement",
                   relations: str | Sequence[str] | None = None,
                   entities_per_relation: int | None = None,
                   **run: Unpack[RunKeywords]) -> SusceptibilityResult:
    """Monte Carlo and Fisher susceptibility of queries to context ("Context versus Prior
    Knowledge in Language Models"): ``ctxleak susceptibility``. ``data``: a relations JSON
    file or ``"demo"``.
    """
    return cast(SusceptibilityResult, run_keywords(SusceptibilityParams, bound))


@over_data(ProbeParams, 'A PII records JSONL file, records in memory, or ``demo`` (synthetic '
                        'subjects).')
def probe(bound: Bound, /, model: str | LanguageModel = "default", data: Any = "demo", *,
          progress: bool = True, mode: str | Sequence[str] | None = None,
          pii: str | Sequence[str] | None = None,
          shots: int | Sequence[int] | str = "1", structure: str = "twins", beam: int = 2,
          max_new_tokens: int | str = "paper", generate: bool = True, subjects: int = 20,
          soft_tokens: int = 20, train_fraction: float = 0.5, epochs: int = 30,
          soft_lr: float = 0.005, context_template: str = "{document}\n{prompt}",
          canary: int | None = None, canary_epochs: int = 4, canary_lr: float = 0.002,
          canary_layers: int = 8, canary_baseline: bool = False, alpha: float = 0.05,
          redact: bool = False, leak_maps: bool = True, **run: Unpack[RunKeywords]) -> ProbeResult:
    """ProPILE PII probing, black-box, white-box and in-context, and the canary check
    ("ProPILE: Probing Privacy Leakage in Large Language Models"): ``ctxleak probe``.
    ``data``: a PII records JSONL file, records in memory, or ``"demo"`` (synthetic
    subjects).
    """
    return cast(ProbeResult, run_keywords(ProbeParams, bound))
