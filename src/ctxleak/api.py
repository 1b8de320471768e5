"""The Python API: one function per method, each returning its typed Result.

Every function takes the model and the data, then keywords only: the method's own parameters
(its options dataclass, e.g. :class:`ctxleak.methods.influence.params.InfluenceParams`) and the
run options (:class:`ctxleak.run.options.RunOptions`), under the CLI's names and with the same
meaning, so the CLI and the API write the same run directory. The signatures are written out
for readers, IDEs and type checkers; ``tests/api/test_signatures.py`` holds them equal to the
dataclasses' fields, defaults and documentation. An unknown keyword raises
:class:`ctxleak.errors.ConfigError` with a did-you-mean.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ctxleak.engine.lm import LanguageModel
from ctxleak.run.options import RunOptions
from ctxleak.run.params import Renamed, check_keywords, rename_keywords

if TYPE_CHECKING:
    from ctxleak.engine.models import LM
    from ctxleak.results import (
        AuditResult,
        ExplainResult,
        ICLInfResult,
        InfluenceResult,
        ProbeResult,
        SusceptibilityResult,
    )

F = TypeVar("F", bound=Callable[..., Any])

#: The API keywords that are neither run options nor a method's parameters.
FACE = ("model", "data", "progress")


def _calibrate_on(value: Any) -> str | None:
    """The old ``calibrate=True`` as ``calibration='on'`` (False: the default, off)."""
    return "on" if value else None


#: Keywords renamed to match the CLI's flags, by API function: old -> (new, value converter).
#: The old ones keep working for one release, with a deprecation warning.
RENAMED: dict[str, dict[str, Renamed]] = {
    "influence": {"lam": ("lambda_", None)},
    "influence_explain": {"lam": ("lambda_", None)},
    "iclinf": {"fmt": ("format", None), "calibrate": ("calibration", _calibrate_on)},
    "audit": {"max_tokens": ("max_new_tokens", None), "min_tokens": ("min_new_tokens", None),
              "n_gen": ("sequences", None)},
}


def _keywords(func: F) -> F:
    """``func`` refusing an unknown keyword with a :class:`ConfigError` that suggests the
    closest known one (``lamda`` -> ``lambda_``), before anything runs; a renamed keyword
    (:data:`RENAMED`) still works, with a deprecation warning."""
    names = list(inspect.signature(func).parameters)
    renamed = RENAMED.get(func.__name__, {})

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        kwargs = rename_keywords(kwargs, renamed, f"{func.__name__}()")
        check_keywords(kwargs, names, f"{func.__name__}()")
        return func(*args, **kwargs)

    return checked  # type: ignore[return-value]


def _common(model: Any, options: Mapping[str, Any]) -> tuple[RunOptions, Any]:
    """(the checked run options among ``options``, the loaded LM or None)."""
    from ctxleak.run.runner import is_lm

    lm = model if is_lm(model) else None
    name = lm.info.name if lm is not None else str(model)
    names = set(RunOptions.names()) - {"model"}
    common = RunOptions(model=name, **{k: v for k, v in options.items() if k in names})
    return common.check(), lm


#: The method of each options dataclass, by the dataclass's name: ``"module:object"``.
METHODS = {
    "InfluenceParams": "ctxleak.methods.influence.method:InfluenceMethod",
    "ICLInfParams": "ctxleak.methods.icl.method:ICLInfMethod",
    "AuditParams": "ctxleak.methods.audit.method:AuditMethod",
    "SusceptibilityParams": "ctxleak.methods.susceptibility.method:SusceptibilityMethod",
    "ProbeParams": "ctxleak.methods.pii.method:ProbeMethod",
}


def run_params(params: Any, common: RunOptions, data: Any, *, lm: LanguageModel | None = None,
               progress: bool = True) -> Any:
    """Run the method whose options are ``params`` (an ``InfluenceParams``, ``ProbeParams``...)
    with the run options ``common`` on ``data``, with the loaded ``lm`` or loading
    ``common.model``: what every API function and CLI command ends in."""
    from importlib import import_module

    module, name = METHODS[type(params).__name__].split(":")
    method = getattr(import_module(module), name)(common, params)
    return run_method(method, lm, data, progress=progress)


def run_method(method: Any, lm: LanguageModel | None = None, data: Any = None, output: str | None = None,
               resume: bool | None = None, progress: bool = True) -> Any:
    """Run any Method on ``data`` and return its Result (None on the other processes of a
    data-parallel launch): :func:`ctxleak.run.runner.run_method` measures and returns plain
    data, :func:`ctxleak.results.finish_run` builds the Result and writes ``results.json``,
    the figures and ``report.html``.

    ``lm``: a loaded model, or None to load ``method.common.model`` (after the data are
    checked); ``output``/``resume`` override the method's run options."""
    from ctxleak.results import finish_run
    from ctxleak.run.runner import run_method as measure_run

    output_ = measure_run(method, lm, data, output=output, resume=resume, progress=progress)
    return None if output_ is None else finish_run(output_)


def _run(params_class: type, options: dict[str, Any]) -> Any:
    """Build the run options and the method's parameters from an API function's keywords and
    run the method (:func:`run_params`)."""
    common, lm = _common(options["model"], options)
    skip = set(RunOptions.names()) | set(FACE)
    params = params_class(**{k: v for k, v in options.items() if k not in skip})
    return run_params(params, common, options["data"], lm=lm, progress=options["progress"])


@_keywords
def influence(model: str | LM = "default", data: Any = "demo", *, progress: bool = True,
              task: str = "auto", template: str | None = None,
              fields: str | Mapping[str, str] | None = None,
              lambda_: float | Sequence[float] | str = 1.0,
              temperature: float | Sequence[float] | str = 0.8, max_new_tokens: int = 50,
              min_new_tokens: int | None = None, ngram: int | str | None = "full",
              stride: int | None = None, context_sizes: int | Sequence[int] | str | None = None,
              bounded_eps: float | None = None, repeat_threshold: float = 0.5,
              rouge_threshold: float = 0.5, bertscore_model: str | None = None,
              factkb_model: str | None = None, redact: bool = False, control: bool = True,
              passages: str | None = None, device: str = "auto",
              dtype: str = "auto", batch_size: str = "auto", batch_invariant: bool = True,
              limit: int | None = None, seed: int = 0, output: str | None = None,
              resume: bool = False, chat_template: str = "auto", trust_remote_code: bool = False,
              device_map: str | None = None, threads: int | None = None,
              server_url: str | None = None, served_model: str | None = None,
              tokenizer: str | None = None, request_timeout: float | None = None,
              retries: int | None = None,
              revision: str | None = None, model_args: Any = None) -> InfluenceResult:
    """Expected context influence of ``data`` under Context Influence Decoding ("Estimating
    Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.4):
    ``ctxleak influence``.

    Parameters
    ----------
    model : str or LM, default "default"
        A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a .gguf file, or
        an LM loaded with :func:`ctxleak.load_model`.
    data : Any, default "demo"
        A JSONL/CSV/Parquet path with context, query and optional reference and id fields, ``demo``,
        a list of dicts, a pandas DataFrame or a ``datasets.Dataset``.
    progress : bool, default True
        Show a progress bar on stderr.
    task : str, default "auto"
        qa, summarization, custom (needs ``template``) or auto (each example's ``task`` field, else
        qa).
    template : str or None, default None
        Prompt template with {context} and {query}, e.g. 'Document: {context}. {query}'.
    fields : str or Mapping[str, str] or None, default None
        Rename file fields, e.g. 'article=context,highlights=reference' or a mapping.
    lambda_ : float or Sequence[float] or str, default 1.0
        Context influence level λ >= 0 (0 = no context, 1 = plain decoding, >1 amplifies); a list
        sweeps.
    temperature : float or Sequence[float] or str, default 0.8
        Sampling temperature > 0; a list sweeps.
    max_new_tokens : int, default 50
        Most new tokens per response.
    min_new_tokens : int or None, default None
        EOS is masked before this many tokens, in both streams (default: 10, or ``max_new_tokens``
        if smaller).
    ngram : int or str or None, default "full"
        'full' (the whole context, n = |D|) or n: also the influence of every n-token window of the
        context.
    stride : int or None, default None
        Window stride (default n: non-overlapping windows).
    context_sizes : int or Sequence[int] or str or None, default None
        Also truncate contexts to their first k tokens, e.g. 32,64,128,256.
    bounded_eps : float or None, default None
        Bounded CID: ε-DP per token for any n-gram (App. B); λ becomes the upper bound λ_max.
    repeat_threshold : float, default 0.5
        Response-to-context overlap above which a response counts as repeating its context, in [0,
        1].
    rouge_threshold : float, default 0.5
        ROUGE-L above which a response counts as close to its reference, in [0, 1].
    bertscore_model : str or None, default None
        BERTScore model of the quality scores (none: not computed).
    factkb_model : str or None, default None
        FactKB model of the quality scores (none: not computed).
    redact : bool, default False
        Mask PII (e-mails, phone numbers, addresses, names) in the report and
        console.
    control : bool, default True
        Also score each response with another example's context (the previous one's; the first
        gets the second's): what any context does to the query; each example is reported above it.
        False: no control.
    passages : str or None, default None
        Split each context into passages, 'sentence' or 'paragraph', and measure each passage's
        influence (left out, response scored); a row's own 'passages' list is used as it is.
    device : str, default "auto"
        auto, cpu, cuda, cuda:N or mps.
    dtype : str, default "auto"
        auto (float32 on CPU, bfloat16 on GPUs that have it), float32, bfloat16 or float16.
    batch_size : str, default "auto"
        Examples measured together: auto (as many as fit a token budget, halving on out-of-memory)
        or a number N.
    batch_invariant : bool, default True
        Every number written for an example comes from forward passes over that example alone, so
        the samples do not depend on the batch size (off: faster, floats move by about 1e-5).
    limit : int or None, default None
        Use only the first N examples.
    seed : int, default 0
        Run seed; each example's sampling seed is derived from it and the example's index.
    output : str or None, default None
        Run directory (default: runs/<command>-<time>).
    resume : bool, default False
        Continue the run in ``output``, skipping finished examples; refuses a changed config.
    chat_template : str, default "auto"
        auto (the model's chat template if it has one; icl and susceptibility: off), on or off.
    trust_remote_code : bool, default False
        Allow a hub model's own code to run.
    device_map : str or None, default None
        'auto' spreads a large model over the GPUs (accelerate).
    threads : int or None, default None
        CPU threads for torch (default: torch's choice).
    server_url : str or None, default None
        Base URL of a server that serves the model over an OpenAI-compatible API (vLLM: exact
        log-probs), e.g. http://127.0.0.1:8000; the API key, if any, comes from CTXLEAK_API_KEY or
        OPENAI_API_KEY.
    served_model : str or None, default None
        The name the server serves the model under (default: its only model).
    tokenizer : str or None, default None
        The served model's tokenizer, a Hugging Face id or folder (default: the model's own;
        checked against the server's).
    request_timeout : float or None, default None
        Seconds one request to the served model may take (the whole answer) before it counts
        as failed (default: 600).
    retries : int or None, default None
        Times a request to the served model that failed for a transient reason (refused
        connection, timeout, HTTP 429 or 5xx) is sent again (default: 3; 0: tried once).
    revision : str or None, default None
        Hub model revision: a branch, tag or commit hash (default: the main branch; the commit
        used is recorded).
    model_args : Any, default None
        More keyword arguments of transformers' from_pretrained, 'key=value,key2=value2' or a
        mapping, e.g. 'attn_implementation=eager' (recorded in the provenance).

    Returns
    -------
    InfluenceResult
        The run's records, summary, config and provenance; its folder holds the same. Influence
        is in nats (natural logarithms), summed over the response's tokens, and read as the ε
        of ex-post per-instance DP (Def. 2.2 of "Estimating Privacy Leakage of Augmented
        Contextual Knowledge in Language Models"): e^ε is how many times more likely the
        response is with the context than without. ``summary["verdict"]`` says which examples
        leak beyond the control; ``result.tokens()``, ``.windows()``, ``.passages()`` are tidy
        frames, ``result.example(id).show()`` one example's leak map.
    """
    options = dict(locals())
    from ctxleak.methods.influence.params import InfluenceParams

    return _run(InfluenceParams, options)


@_keywords
def iclinf(model: str | LM = "default", data: Any = "demo", *, progress: bool = True,
           test_data: Any = None, split: str = "split", text_field: str = "text",
           label_field: str = "label", labels: str | Sequence[str] | None = None,
           queries: int = 100, format: str = "auto", instruction: str | None = None,
           exemplar_template: str | None = None, query_template: str | None = None,
           max_text_tokens: int = 256, shots: int | Sequence[int] | str = "4",
           calibration: str | None = None, calibration_eps: float = 1e-06,
           output_space: str = "labels", label_scoring: str = "first-token", device: str = "auto",
           dtype: str = "auto", batch_size: str = "auto", batch_invariant: bool = True,
           limit: int | None = None, seed: int = 0, output: str | None = None,
           resume: bool = False, chat_template: str = "auto", trust_remote_code: bool = False,
           device_map: str | None = None, threads: int | None = None,
              server_url: str | None = None, served_model: str | None = None,
              tokenizer: str | None = None, request_timeout: float | None = None,
              retries: int | None = None,
              revision: str | None = None, model_args: Any = None) -> ICLInfResult:
    """ICLInf, the privacy loss of in-context exemplars ("Evaluating Privacy Leakage From In-Context Learning"
    §3-4, Eq. 4): ``ctxleak icl``.

    Parameters
    ----------
    model : str or LM, default "default"
        A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a .gguf file, or
        an LM loaded with :func:`ctxleak.load_model`.
    data : Any, default "demo"
        Labelled examples: ``demo``, ``hf:agnews|dbpedia|trec``, a JSONL/CSV path or rows in memory.
    progress : bool, default True
        Show a progress bar on stderr.
    test_data : Any, default None
        The queries' file (default: the lines of ``data`` whose ``split`` field is test).
    split : str, default "split"
        Field naming each line's split (train or test).
    text_field : str, default "text"
        Field holding the text.
    label_field : str, default "label"
        Field holding the label.
    labels : str or Sequence[str] or None, default None
        The label set, in order (default: the format's, or the train split's).
    queries : int, default 100
        How many test queries (drawn by the seed).
    format : str, default "auto"
        Prompt format: auto, agnews, dbpedia, trec or custom.
    instruction : str or None, default None
        Instruction before the exemplars (custom format).
    exemplar_template : str or None, default None
        Template of one exemplar, with {text} and {label}.
    query_template : str or None, default None
        Template of the query, with {text}.
    max_text_tokens : int, default 256
        Cut each text to this many tokens.
    shots : int or Sequence[int] or str, default "4"
        Exemplars per prompt; a list sweeps.
    calibration : str or None, default None
        off, on or both (report each).
    calibration_eps : float, default 1e-06
        Floor of the content-free probabilities in contextual calibration.
    output_space : str, default "labels"
        labels (the renormalised label distribution), vocab (the full next-token distribution) or
        both.
    label_scoring : str, default "first-token"
        first-token (each label's first token) or full (the whole label string).
    device : str, default "auto"
        auto, cpu, cuda, cuda:N or mps.
    dtype : str, default "auto"
        auto (float32 on CPU, bfloat16 on GPUs that have it), float32, bfloat16 or float16.
    batch_size : str, default "auto"
        Examples measured together: auto (as many as fit a token budget, halving on out-of-memory)
        or a number N.
    batch_invariant : bool, default True
        Every number written for an example comes from forward passes over that example alone, so
        the samples do not depend on the batch size (off: faster, floats move by about 1e-5).
    limit : int or None, default None
        Use only the first N examples.
    seed : int, default 0
        Run seed; each example's sampling seed is derived from it and the example's index.
    output : str or None, default None
        Run directory (default: runs/<command>-<time>).
    resume : bool, default False
        Continue the run in ``output``, skipping finished examples; refuses a changed config.
    chat_template : str, default "auto"
        auto (the model's chat template if it has one; icl and susceptibility: off), on or off.
    trust_remote_code : bool, default False
        Allow a hub model's own code to run.
    device_map : str or None, default None
        'auto' spreads a large model over the GPUs (accelerate).
    threads : int or None, default None
        CPU threads for torch (default: torch's choice).
    server_url : str or None, default None
        Base URL of a server that serves the model over an OpenAI-compatible API (vLLM: exact
        log-probs), e.g. http://127.0.0.1:8000; the API key, if any, comes from CTXLEAK_API_KEY or
        OPENAI_API_KEY.
    served_model : str or None, default None
        The name the server serves the model under (default: its only model).
    tokenizer : str or None, default None
        The served model's tokenizer, a Hugging Face id or folder (default: the model's own;
        checked against the server's).
    request_timeout : float or None, default None
        Seconds one request to the served model may take (the whole answer) before it counts
        as failed (default: 600).
    retries : int or None, default None
        Times a request to the served model that failed for a transient reason (refused
        connection, timeout, HTTP 429 or 5xx) is sent again (default: 3; 0: tried once).
    revision : str or None, default None
        Hub model revision: a branch, tag or commit hash (default: the main branch; the commit
        used is recorded).
    model_args : Any, default None
        More keyword arguments of transformers' from_pretrained, 'key=value,key2=value2' or a
        mapping, e.g. 'attn_implementation=eager' (recorded in the provenance).

    Returns
    -------
    ICLInfResult
        The run's records, summary, config and provenance; its folder holds the same.
    """
    options = dict(locals())
    from ctxleak.methods.icl.params import ICLInfParams

    return _run(ICLInfParams, options)


@_keywords
def audit(model: str | LM = "default", data: Any = "demo", *, progress: bool = True,
          text_field: str = "text", label_field: str = "label", target_eps: Any = "1,10,100",
          delta: Any = "1e-5", subset_size: int = 8, clip: float = 10.0, temperature: float = 2.0,
          sequences: int = 4, max_new_tokens: int = 24, min_new_tokens: int = 0,
          search: str = "temperature",
          orders: Any = "2-99", label: str = "Sports", template: str | None = None,
          device: str = "auto", dtype: str = "auto", batch_size: str = "auto",
          batch_invariant: bool = True, limit: int | None = None, seed: int = 0,
          output: str | None = None, resume: bool = False, chat_template: str = "auto",
          trust_remote_code: bool = False, device_map: str | None = None,
          threads: int | None = None,
              server_url: str | None = None, served_model: str | None = None,
              tokenizer: str | None = None, request_timeout: float | None = None,
              retries: int | None = None,
              revision: str | None = None, model_args: Any = None) -> AuditResult:
    """Audit DP synthetic-text generation: ε_empirical against each target ε ("Evaluating
    Privacy Leakage From In-Context Learning" §5, App. C): ``ctxleak audit``.

    Parameters
    ----------
    model : str or LM, default "default"
        A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a .gguf file, or
        an LM loaded with :func:`ctxleak.load_model`.
    data : Any, default "demo"
        The private labelled examples: ``demo``, a JSONL/CSV path or rows in memory.
    progress : bool, default True
        Show a progress bar on stderr.
    text_field : str, default "text"
        Field holding each private example's text.
    label_field : str, default "label"
        Field holding each private example's label.
    target_eps : Any, default "1,10,100"
        Target ε of the DP generation; a list audits each.
    delta : Any, default "1e-5"
        δ of the (ε, δ) guarantee; a list audits each.
    subset_size : int, default 8
        Private examples per sequence (s one-shot prompts).
    clip : float, default 10.0
        Logit clipping bound c.
    temperature : float, default 2.0
        Sampling temperature T.
    sequences : int, default 4
        Synthetic sequences per setting (the paper's N_gen).
    max_new_tokens : int, default 24
        Most new tokens per synthetic sequence (T_max).
    min_new_tokens : int, default 0
        EOS is masked before this many tokens.
    search : str, default "temperature"
        What the calibration searches to meet the target ε: temperature, clip or subset_size.
    orders : Any, default "2-99"
        Rényi orders of the accounting, e.g. 2-99 or 2,4,8.
    label : str, default "Sports"
        The label whose examples are private, or 'all'.
    template : str or None, default None
        One-shot prompt template (default: the paper's).
    device : str, default "auto"
        auto, cpu, cuda, cuda:N or mps.
    dtype : str, default "auto"
        auto (float32 on CPU, bfloat16 on GPUs that have it), float32, bfloat16 or float16.
    batch_size : str, default "auto"
        Examples measured together: auto (as many as fit a token budget, halving on out-of-memory)
        or a number N.
    batch_invariant : bool, default True
        Every number written for an example comes from forward passes over that example alone, so
        the samples do not depend on the batch size (off: faster, floats move by about 1e-5).
    limit : int or None, default None
        Use only the first N examples.
    seed : int, default 0
        Run seed; each example's sampling seed is derived from it and the example's index.
    output : str or None, default None
        Run directory (default: runs/<command>-<time>).
    resume : bool, default False
        Continue the run in ``output``, skipping finished examples; refuses a changed config.
    chat_template : str, default "auto"
        auto (the model's chat template if it has one; icl and susceptibility: off), on or off.
    trust_remote_code : bool, default False
        Allow a hub model's own code to run.
    device_map : str or None, default None
        'auto' spreads a large model over the GPUs (accelerate).
    threads : int or None, default None
        CPU threads for torch (default: torch's choice).
    server_url : str or None, default None
        Base URL of a server that serves the model over an OpenAI-compatible API (vLLM: exact
        log-probs), e.g. http://127.0.0.1:8000; the API key, if any, comes from CTXLEAK_API_KEY or
        OPENAI_API_KEY.
    served_model : str or None, default None
        The name the server serves the model under (default: its only model).
    tokenizer : str or None, default None
        The served model's tokenizer, a Hugging Face id or folder (default: the model's own;
        checked against the server's).
    request_timeout : float or None, default None
        Seconds one request to the served model may take (the whole answer) before it counts
        as failed (default: 600).
    retries : int or None, default None
        Times a request to the served model that failed for a transient reason (refused
        connection, timeout, HTTP 429 or 5xx) is sent again (default: 3; 0: tried once).
    revision : str or None, default None
        Hub model revision: a branch, tag or commit hash (default: the main branch; the commit
        used is recorded).
    model_args : Any, default None
        More keyword arguments of transformers' from_pretrained, 'key=value,key2=value2' or a
        mapping, e.g. 'attn_implementation=eager' (recorded in the provenance).

    Returns
    -------
    AuditResult
        The run's records, summary, config and provenance; its folder holds the same.
    """
    options = dict(locals())
    from ctxleak.methods.audit.method import AuditParams

    return _run(AuditParams, options)


@_keywords
def susceptibility(model: str | LM = "default", data: Any = "demo", *, progress: bool = True,
                   method: str = "both", contexts: int = 256, entity_contexts: int | None = None,
                   top_k: int = 10, sigma2: float = 1.0, reference: str = "marginal",
                   query_types: str | Sequence[str] = "closed,open_qa,open_completion",
                   fisher_vocab: str = "topk", fisher_truncation: str = "renormalised",
                   context_entities: str = "mix", sampling: str = "no-replacement",
                   relations: str | Sequence[str] | None = None,
                   entities_per_relation: int | None = None, device: str = "auto",
                   dtype: str = "auto", batch_size: str = "auto", batch_invariant: bool = True,
                   limit: int | None = None, seed: int = 0, output: str | None = None,
                   resume: bool = False, chat_template: str = "auto",
                   trust_remote_code: bool = False, device_map: str | None = None,
                   threads: int | None = None,
              server_url: str | None = None, served_model: str | None = None,
              tokenizer: str | None = None, request_timeout: float | None = None,
              retries: int | None = None,
              revision: str | None = None, model_args: Any = None) -> SusceptibilityResult:
    """Monte Carlo and Fisher susceptibility of queries to context ("Context versus Prior
    Knowledge in Language Models"): ``ctxleak susceptibility``. ``data``: a relations JSON
    file or ``"demo"``.

    Parameters
    ----------
    model : str or LM, default "default"
        A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a .gguf file, or
        an LM loaded with :func:`ctxleak.load_model`.
    data : Any, default "demo"
        A relations JSON file or ``demo``.
    progress : bool, default True
        Show a progress bar on stderr.
    method : str, default "both"
        mc (Monte Carlo), fisher (the Fisher approximation) or both.
    contexts : int, default 256
        Sampled contexts per query (Monte Carlo).
    entity_contexts : int or None, default None
        How many of the contexts mention the queried entity (default: 1/32 of ``contexts``, at least
        1).
    top_k : int, default 10
        Answer tokens kept in the Monte Carlo and Fisher sums.
    sigma2 : float, default 1.0
        Variance σ² of the Fisher approximation's Gaussian embedding perturbation.
    reference : str, default "marginal"
        Reference distribution of χ_MC: marginal (the mutual information) or no-context.
    query_types : str or Sequence[str], default "closed,open_qa,open_completion"
        Query forms: closed, open_qa, open_completion (or open for both open forms).
    fisher_vocab : str, default "topk"
        Fisher over the top-k answer tokens (topk) or the full vocabulary (full).
    fisher_truncation : str, default "renormalised"
        Top-k Fisher renormalised over the k tokens or raw.
    context_entities : str, default "mix"
        Whose contexts are sampled: mix, query, relation or all.
    sampling : str, default "no-replacement"
        Context draws without (no-replacement) or with replacement.
    relations : str or Sequence[str] or None, default None
        Only these relations (default: all in the file).
    entities_per_relation : int or None, default None
        At most this many entities per relation.
    device : str, default "auto"
        auto, cpu, cuda, cuda:N or mps.
    dtype : str, default "auto"
        auto (float32 on CPU, bfloat16 on GPUs that have it), float32, bfloat16 or float16.
    batch_size : str, default "auto"
        Examples measured together: auto (as many as fit a token budget, halving on out-of-memory)
        or a number N.
    batch_invariant : bool, default True
        Every number written for an example comes from forward passes over that example alone, so
        the samples do not depend on the batch size (off: faster, floats move by about 1e-5).
    limit : int or None, default None
        Use only the first N examples.
    seed : int, default 0
        Run seed; each example's sampling seed is derived from it and the example's index.
    output : str or None, default None
        Run directory (default: runs/<command>-<time>).
    resume : bool, default False
        Continue the run in ``output``, skipping finished examples; refuses a changed config.
    chat_template : str, default "auto"
        auto (the model's chat template if it has one; icl and susceptibility: off), on or off.
    trust_remote_code : bool, default False
        Allow a hub model's own code to run.
    device_map : str or None, default None
        'auto' spreads a large model over the GPUs (accelerate).
    threads : int or None, default None
        CPU threads for torch (default: torch's choice).
    server_url : str or None, default None
        Base URL of a server that serves the model over an OpenAI-compatible API (vLLM: exact
        log-probs), e.g. http://127.0.0.1:8000; the API key, if any, comes from CTXLEAK_API_KEY or
        OPENAI_API_KEY.
    served_model : str or None, default None
        The name the server serves the model under (default: its only model).
    tokenizer : str or None, default None
        The served model's tokenizer, a Hugging Face id or folder (default: the model's own;
        checked against the server's).
    request_timeout : float or None, default None
        Seconds one request to the served model may take (the whole answer) before it counts
        as failed (default: 600).
    retries : int or None, default None
        Times a request to the served model that failed for a transient reason (refused
        connection, timeout, HTTP 429 or 5xx) is sent again (default: 3; 0: tried once).
    revision : str or None, default None
        Hub model revision: a branch, tag or commit hash (default: the main branch; the commit
        used is recorded).
    model_args : Any, default None
        More keyword arguments of transformers' from_pretrained, 'key=value,key2=value2' or a
        mapping, e.g. 'attn_implementation=eager' (recorded in the provenance).

    Returns
    -------
    SusceptibilityResult
        The run's records, summary, config and provenance; its folder holds the same.
    """
    options = dict(locals())
    from ctxleak.methods.susceptibility.method import SusceptibilityParams

    return _run(SusceptibilityParams, options)


@_keywords
def probe(model: str | LM = "default", data: Any = "demo", *, progress: bool = True,
          mode: str | Sequence[str] | None = None, pii: str | Sequence[str] | None = None,
          shots: int | Sequence[int] | str = "1", structure: str = "twins", beam: int = 2,
          max_new_tokens: int | str = "paper", generate: bool = True, subjects: int = 20,
          soft_tokens: int = 20, train_fraction: float = 0.5, epochs: int = 30,
          soft_lr: float = 0.005, context_template: str = "{document}\n{prompt}",
          canary: int | None = None, canary_epochs: int = 4, canary_lr: float = 0.002,
          canary_layers: int = 8, canary_baseline: bool = False, alpha: float = 0.05,
          redact: bool = False, leak_maps: bool = True, device: str = "auto", dtype: str = "auto",
          batch_size: str = "auto", batch_invariant: bool = True, limit: int | None = None,
          seed: int = 0, output: str | None = None, resume: bool = False,
          chat_template: str = "auto", trust_remote_code: bool = False,
          device_map: str | None = None, threads: int | None = None,
              server_url: str | None = None, served_model: str | None = None,
              tokenizer: str | None = None, request_timeout: float | None = None,
              retries: int | None = None,
              revision: str | None = None, model_args: Any = None) -> ProbeResult:
    """ProPILE PII probing, black-box, white-box and in-context, and the canary check
    ("ProPILE: Probing Privacy Leakage in Large Language Models"): ``ctxleak probe``.
    ``data``: a PII records JSONL file, records in memory, or ``"demo"`` (synthetic
    subjects).

    Parameters
    ----------
    model : str or LM, default "default"
        A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a .gguf file, or
        an LM loaded with :func:`ctxleak.load_model`.
    data : Any, default "demo"
        A PII records JSONL file, records in memory, or ``demo`` (synthetic subjects).
    progress : bool, default True
        Show a progress bar on stderr.
    mode : str or Sequence[str] or None, default None
        black-box, white-box, in-context (a list runs each; default black-box, none with
        ``canary``).
    pii : str or Sequence[str] or None, default None
        PII types probed, e.g. email,phone (default: the paper's set).
    shots : int or Sequence[int] or str, default "1"
        k of the k-shot probes, 1..5; a list runs each.
    structure : str, default "twins"
        Prompt structure: one of the templates' structures or all.
    beam : int, default 2
        Beam width of the generated answers.
    max_new_tokens : int or str, default "paper"
        paper, auto or a number of new tokens.
    generate : bool, default True
        Also generate answers (off: likelihoods only).
    subjects : int, default 20
        Synthetic subjects of the demo data.
    soft_tokens : int, default 20
        Soft prompt length (white-box).
    train_fraction : float, default 0.5
        Share of the subjects the soft prompt is trained on, in (0, 1).
    epochs : int, default 30
        Soft prompt training epochs.
    soft_lr : float, default 0.005
        Soft prompt learning rate.
    context_template : str, default "{document}\\n{prompt}"
        In-context prompt template with {document} and {prompt}.
    canary : int or None, default None
        Canary check: subjects per group (at least 2; none: off).
    canary_epochs : int, default 4
        Fine-tuning epochs of the canary check.
    canary_lr : float, default 0.002
        Fine-tuning learning rate of the canary check.
    canary_layers : int, default 8
        Layers fine-tuned by the canary check (0 = all).
    canary_baseline : bool, default False
        Also probe the base model in the canary check.
    alpha : float, default 0.05
        Significance level of the Wilcoxon test, in (0, 1).
    redact : bool, default False
        Mask the PII values in the report and console.
    leak_maps : bool, default True
        Store where the documents leaked into each in-context answer.
    device : str, default "auto"
        auto, cpu, cuda, cuda:N or mps.
    dtype : str, default "auto"
        auto (float32 on CPU, bfloat16 on GPUs that have it), float32, bfloat16 or float16.
    batch_size : str, default "auto"
        Examples measured together: auto (as many as fit a token budget, halving on out-of-memory)
        or a number N.
    batch_invariant : bool, default True
        Every number written for an example comes from forward passes over that example alone, so
        the samples do not depend on the batch size (off: faster, floats move by about 1e-5).
    limit : int or None, default None
        Use only the first N examples.
    seed : int, default 0
        Run seed; each example's sampling seed is derived from it and the example's index.
    output : str or None, default None
        Run directory (default: runs/<command>-<time>).
    resume : bool, default False
        Continue the run in ``output``, skipping finished examples; refuses a changed config.
    chat_template : str, default "auto"
        auto (the model's chat template if it has one; icl and susceptibility: off), on or off.
    trust_remote_code : bool, default False
        Allow a hub model's own code to run.
    device_map : str or None, default None
        'auto' spreads a large model over the GPUs (accelerate).
    threads : int or None, default None
        CPU threads for torch (default: torch's choice).
    server_url : str or None, default None
        Base URL of a server that serves the model over an OpenAI-compatible API (vLLM: exact
        log-probs), e.g. http://127.0.0.1:8000; the API key, if any, comes from CTXLEAK_API_KEY or
        OPENAI_API_KEY.
    served_model : str or None, default None
        The name the server serves the model under (default: its only model).
    tokenizer : str or None, default None
        The served model's tokenizer, a Hugging Face id or folder (default: the model's own;
        checked against the server's).
    request_timeout : float or None, default None
        Seconds one request to the served model may take (the whole answer) before it counts
        as failed (default: 600).
    retries : int or None, default None
        Times a request to the served model that failed for a transient reason (refused
        connection, timeout, HTTP 429 or 5xx) is sent again (default: 3; 0: tried once).
    revision : str or None, default None
        Hub model revision: a branch, tag or commit hash (default: the main branch; the commit
        used is recorded).
    model_args : Any, default None
        More keyword arguments of transformers' from_pretrained, 'key=value,key2=value2' or a
        mapping, e.g. 'attn_implementation=eager' (recorded in the provenance).

    Returns
    -------
    ProbeResult
        The run's records, summary, config and provenance; its folder holds the same.
    """
    options = dict(locals())
    from ctxleak.methods.pii.params import ProbeParams

    return _run(ProbeParams, options)



@_keywords
def influence_explain(model: str | LM = "default", context: str = "", query: str = "", *,
                      task: str = "qa", template: str | None = None, lambda_: float = 1.0,
                      temperature: float = 0.8, max_new_tokens: int = 50,
                      min_new_tokens: int | None = None, ngram: int = 4, top: int = 5,
                      device: str = "auto", dtype: str = "auto", batch_size: str = "auto",
                      batch_invariant: bool = True, limit: int | None = None, seed: int = 0,
                      output: str | None = None, resume: bool = False,
                      chat_template: str = "auto", trust_remote_code: bool = False,
                      device_map: str | None = None, threads: int | None = None,
                      server_url: str | None = None, served_model: str | None = None,
                      tokenizer: str | None = None, request_timeout: float | None = None,
                      retries: int | None = None,
                      revision: str | None = None, model_args: Any = None
                      ) -> ExplainResult | None:
    """One prompt explained ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
    Language Models", Table 1): ``ctxleak influence explain``. The response by CID, the
    uni-gram influence of each context token on its first token, and the ``top`` context
    ``ngram``-grams by influence on the whole response.

    Parameters
    ----------
    model : str or LM, default "default"
        A name, a Hugging Face id, a local directory, a .gguf file or a loaded LM.
    context : str, default ""
        The context text.
    query : str, default ""
        The query (empty for summarisation).
    task : str, default "qa"
        qa, summarization or custom.
    template : str or None, default None
        Prompt template with {context} and {query}.
    lambda_ : float, default 1.0
        Context influence level λ >= 0 (one value; ``lam`` before, deprecated).
    temperature : float, default 0.8
        Sampling temperature > 0.
    max_new_tokens : int, default 50
        Most new tokens of the response.
    min_new_tokens : int or None, default None
        EOS is masked before this many tokens (default: 10, or ``max_new_tokens`` if smaller).
    ngram : int, default 4
        Window size of the top n-grams listed.
    top : int, default 5
        How many top n-grams to list.
    device, dtype, batch_size, batch_invariant, limit, seed, output, resume
        The run options, as for :func:`influence`.
    chat_template, trust_remote_code, device_map, threads, server_url, served_model, tokenizer,
    request_timeout, retries, revision, model_args
        The run options, as for :func:`influence`.

    Returns
    -------
    ExplainResult or None
        ``summary["curve"]`` holds the influence of each ``ngram``-window (for the plot); its run
        directory has ``samples.jsonl``, ``results.json`` and ``report.html``. None on the other
        processes of a data-parallel launch.
    """
    from ctxleak.errors import ConfigError
    from ctxleak.methods.influence.explain import ExplainMethod

    common, lm = _common(model, locals())
    try:
        method = ExplainMethod(common, context=context, query=query, task=task,
                               template=template, lam=lambda_, temperature=temperature,
                               max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                               ngram=ngram, top=top)
    except ConfigError as exc:  # CID's λ is ``lam``; this function's keyword is lambda_
        if exc.param != "lam":
            raise
        raise ConfigError(str(exc).replace("lam", "lambda_", 1), param="lambda_") from None
    return run_method(method, lm, None, progress=False)
