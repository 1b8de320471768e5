"""What every API function ends in: its keywords checked (an unknown one gets a did-you-mean,
a renamed one still works), split into the run options and the method's parameters, the method
made (:func:`method_for`), run (:func:`ctxleak.run.runner.run_method`, plain data) and finished
(:func:`ctxleak.results.finish_run`: the Result, ``results.json``, the report)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar, Union, cast

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.audit.method import AuditMethod, AuditParams
from ctxleak.methods.icl.method import ICLInfMethod
from ctxleak.methods.icl.params import ICLInfParams
from ctxleak.methods.influence.method import InfluenceMethod
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.pii.method import ProbeMethod
from ctxleak.methods.pii.params import ProbeParams
from ctxleak.methods.susceptibility.method import SusceptibilityMethod, SusceptibilityParams
from ctxleak.results import Result, finish_run, result_class
from ctxleak.run import runner
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.params import Renamed, check_keywords, rename_keywords

F = TypeVar("F", bound=Callable[..., Any])

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


def keywords(func: F) -> F:
    """``func`` refusing an unknown keyword with a :class:`ctxleak.errors.ConfigError` that
    suggests the closest known one (``lamda`` -> ``lambda_``), before anything runs; a renamed
    keyword (:data:`RENAMED`) still works, with a deprecation warning."""
    names = list(inspect.signature(func).parameters)
    renamed = RENAMED.get(func.__name__, {})

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        kwargs = rename_keywords(kwargs, renamed, f"{func.__name__}()")
        check_keywords(kwargs, names, f"{func.__name__}()")
        return func(*args, **kwargs)

    return checked  # type: ignore[return-value]


def run_options(model: str | LanguageModel, given: Mapping[str, Any]
                ) -> tuple[RunOptions, LanguageModel | None]:
    """(the checked run options among the keywords ``given``, the loaded model or None)."""
    lm = cast(LanguageModel, model) if runner.is_lm(model) else None
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


def run_method(method: Method, lm: LanguageModel | None = None, data: Any = None,
               output: str | None = None,
               resume: bool | None = None, progress: bool = True) -> Result | None:
    """Run ``method`` on ``data`` with the model ``lm`` and return its Result, its run folder
    holding ``samples.jsonl``, ``results.json``, ``report.html`` and the figures.

    ``lm``: a loaded model (any backend) or None to load ``method.common.model`` (after the
    data are checked). ``output``/``resume`` override the method's run options. Every process
    of a data-parallel launch calls this; only rank 0 gets the Result (the others get None).
    """
    checks = result_class(method.name).checks  # a resume checks the stored rows with them
    done = runner.run_method(method, lm, data, output=output, resume=resume, progress=progress,
                             check_row=checks.row_problem if checks is not None else None)
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
