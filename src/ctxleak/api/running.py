"""What every API function ends in: its keywords checked (an unknown one gets a did-you-mean,
a renamed one still works) and bound to its signature (:func:`keywords`), split into the run
options (typed once, :class:`RunKeywords`) and the method's parameters, the method made
(:func:`method_for`), run (:func:`ctxleak.run.runner.run_method`, plain data) and finished
(:func:`ctxleak.results.finish_run`: the Result, ``results.json``, the report)."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, Concatenate, ParamSpec, TypedDict, TypeVar, Union, cast

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.audit.method import AuditMethod, AuditParams
from ctxleak.methods.icl.method import ICLInfMethod
from ctxleak.methods.icl.params import ICLInfParams
from ctxleak.methods.influence.method import InfluenceMethod
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.pii.method import ProbeMethod
from ctxleak.methods.pii.params import ProbeParams
from ctxleak.methods.susceptibility.method import SusceptibilityMethod, SusceptibilityParams
from ctxleak.report.forwarding import scrubber_for
from ctxleak.results import Result, finish_run, result_class
from ctxleak.run import runner
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.params import Renamed, check_keywords, rename_keywords
from ctxleak.targets.base import Target

R = TypeVar("R")
A = ParamSpec("A")

#: The parameters of one of the methods the API runs over a dataset.
MethodParams = Union[InfluenceParams, ICLInfParams, AuditParams, SusceptibilityParams,
                     ProbeParams]
P = TypeVar("P", InfluenceParams, ICLInfParams, AuditParams, SusceptibilityParams, ProbeParams)

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


class RunKeywords(TypedDict, total=False):
    """The run options as keywords of every API function (``**run: Unpack[RunKeywords]``):
    the fields of :class:`ctxleak.run.options.RunOptions` but ``model`` (each function's first
    parameter), under the same names and types; a run option left out takes its default there.
    Typed once here so that ``help()``, IDEs and type checkers see every keyword."""

    device: str
    dtype: str
    batch_size: str
    batch_invariant: bool
    limit: int | None
    seed: int
    output: str | None
    resume: bool
    chat_template: str
    trust_remote_code: bool
    device_map: str | None
    threads: int | None
    server_url: str | None
    served_model: str | None
    tokenizer: str | None
    request_timeout: float | None
    retries: int | None
    revision: str | None
    model_args: Any
    keep_texts: bool


#: One call of an API function as :func:`keywords` binds it: every parameter of the function's
#: signature by name, given or defaulted, and the run options given (those left out take
#: :class:`RunOptions`' defaults).
Bound = Mapping[str, Any]


def accepted(signature: inspect.Signature) -> list[str]:
    """The keywords a function of this ``signature`` takes: its named parameters, and the run
    options in place of its ``**run: Unpack[RunKeywords]``."""
    names: list[str] = []
    for param in signature.parameters.values():
        names += (list(RunKeywords.__annotations__) if param.kind is param.VAR_KEYWORD
                  else [param.name])
    return names


def bind(signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any],
         where: str) -> Bound:
    """The call ``(*args, **kwargs)`` of ``where`` bound to ``signature``, defaults applied and
    the run options of ``**run`` set beside the other parameters (a :data:`Bound`)."""
    try:
        call = signature.bind(*args, **kwargs)
    except TypeError as exc:  # too many positional arguments, or one given twice
        raise TypeError(f"{where}: {exc}") from None
    call.apply_defaults()
    bound: dict[str, Any] = {}
    for name, value in call.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            bound.update(value)
        else:
            bound[name] = value
    return bound


def keywords(func: Callable[Concatenate[Bound, A], R]) -> Callable[A, R]:
    """``func`` with every call checked and bound before anything runs. An unknown keyword is
    a :class:`ctxleak.errors.ConfigError` that suggests the closest known one (``lamda`` ->
    ``lambda_``); a renamed keyword (:data:`RENAMED`) still works, with a deprecation warning.
    The call is bound to the signature shown, ``func``'s without its first parameter
    (:func:`bind`), and handed to ``func`` as that first argument, before the call's own."""
    where = f"{func.__name__}()"
    full = inspect.signature(func)
    shown = full.replace(parameters=list(full.parameters.values())[1:])
    names = accepted(shown)
    renamed = RENAMED.get(func.__name__, {})

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> R:
        kwargs = rename_keywords(kwargs, renamed, where)
        check_keywords(kwargs, names, where)
        return func(bind(shown, args, kwargs, where), *args, **kwargs)

    checked.__signature__ = shown  # type: ignore[attr-defined]
    del checked.__wrapped__  # documentation tools unwrap: the signature shown is checked's own
    return cast(Callable[A, R], checked)


def run_options(model: str | LanguageModel, given: Mapping[str, Any]
                ) -> tuple[RunOptions, LanguageModel | None]:
    """(the checked run options among the keywords ``given``, the loaded model or None)."""
    lm = model if isinstance(model, LanguageModel) else None
    if lm is None and not isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"model must be a name, a Hugging Face id, a path or a loaded model "
                          f"(ctxleak.load_model), not a {type(model).__name__}", param="model")
    name = lm.info.name if lm is not None else str(model)
    names = set(RunOptions.names()) - {"model"}
    common = RunOptions(model=name, **{k: v for k, v in given.items() if k in names})
    if lm is not None:  # a loaded model names itself (a served one: where, under which name)
        common = replace(common, **lm.run_options())
    return common.check(), lm


def params_of(params_class: type[P], given: Mapping[str, Any]) -> P:
    """The method's parameters among the keywords ``given`` (checked by ``params_class``)."""
    return params_class(**{f.name: given[f.name] for f in fields(params_class)
                           if f.name in given})


def method_for(params: MethodParams, common: RunOptions) -> Method:
    """The Method that runs ``params`` under the run options ``common``."""
    if isinstance(params, InfluenceParams):
        return InfluenceMethod(common, params)
    if isinstance(params, ICLInfParams):
        return ICLInfMethod(common, params)
    if isinstance(params, AuditParams):
        return AuditMethod(common, params)
    if isinstance(params, SusceptibilityParams):
        return SusceptibilityMethod(common, params)
    return ProbeMethod(common, params)


def run_method(method: Method, lm: LanguageModel | Target | None = None, data: Any = None,
               output: str | None = None, resume: bool | None = None, progress: bool = True,
               max_queries: int | None = None) -> Result | None:
    """Run ``method`` on ``data`` over ``lm`` and return its Result, its run folder holding
    ``samples.jsonl``, ``results.json``, ``report.html`` and the figures.

    ``lm``: what answers: a loaded model (any backend), None to load ``method.common.model``
    (after the data are checked), or a Target (``ctxleak.targets``), asked at most
    ``max_queries`` questions in the run folder. ``output``/``resume`` override the method's
    run options. Every process of a data-parallel launch calls this; only rank 0 gets the
    Result (the others get None).
    """
    checks = result_class(method.name).checks  # a resume checks the stored rows with them
    done = runner.run_method(method, lm, data, output=output, resume=resume, progress=progress,
                             check_row=checks.row_problem if checks is not None else None,
                             max_queries=max_queries, scrubber=scrubber_for)
    return finish_run(done) if done is not None else None


def run_params(params: MethodParams, common: RunOptions, data: Any, *, lm: LanguageModel | None = None,
               progress: bool = True) -> Result | None:
    """Run the method of ``params`` with the run options ``common`` on ``data``, with the
    loaded ``lm`` or loading ``common.model``: what every API function and CLI command over a
    dataset ends in."""
    return run_method(method_for(params, common), lm, data, progress=progress)


def run_keywords(params_class: type[P], given: Mapping[str, Any]) -> Result | None:
    """Run an API function's method from its keywords ``given`` (``model``, ``data``,
    ``progress``, the method's parameters, the run options)."""
    common, lm = run_options(given["model"], given)
    return run_params(params_of(params_class, given), common, given["data"], lm=lm,
                      progress=given["progress"])
