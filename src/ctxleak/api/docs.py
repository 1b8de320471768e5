"""The API functions' docstrings, written from the options themselves: each keyword's line is
its field's documentation (:func:`ctxleak.run.params.option_docs` of the method's parameters and
of :class:`ctxleak.run.options.RunOptions`), so the run options are documented once, in
``RunOptions``, and every function shows them in numpydoc form, the run options of its
``**run: Unpack[RunKeywords]`` among its other keywords."""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from ctxleak.api.running import RunKeywords
from ctxleak.run.options import RunOptions
from ctxleak.run.params import option_docs

F = TypeVar("F", bound=Callable[..., Any])

#: The line wraps of the generated docstrings.
WIDTH = 96

#: The ``model`` keyword of every API function.
MODEL_DOC = ("A name (``default``, ``gemma-270m``), a Hugging Face id, a local directory, a "
             ".gguf file, or a model loaded with :func:`ctxleak.load_model` (in-process or served).")
#: The ``progress`` keyword of every API function that runs over a dataset.
PROGRESS_DOC = "Show a progress bar on stderr."
#: What every Result holds, the start of each function's Returns section.
RETURNS_DOC = "The run's records, summary, config and provenance; its folder holds the same."


def run_option_docs() -> dict[str, str]:
    """The run options' documentation, ``model`` apart (each API function says what it takes)."""
    return {k: v for k, v in option_docs(RunOptions).items() if k != "model"}


def type_text(annotation: Any) -> str:
    """A parameter's annotation as numpydoc writes a type: ``str | None`` -> ``str or None``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return " or ".join(part.strip() for part in text.split(" | "))


def default_text(value: Any) -> str:
    """A default as the docstring shows it: strings in double quotes, escapes kept visible."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def fill(text: str) -> str:
    """A parameter's documentation as its entry's indented body."""
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent="    ",
                         subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)


def entry(name: str, annotation: Any, default: Any, doc: str) -> list[str]:
    """One numpydoc entry: ``name : type, default value``, then the documentation."""
    head = f"{name} : {type_text(annotation)}"
    if default is not inspect.Parameter.empty:
        head += f", default {default_text(default)}"
    return [head, fill(doc)]


def parameters_section(func: Callable[..., Any], docs: Mapping[str, str]) -> str:
    """The numpydoc ``Parameters`` section of ``func``: one entry per parameter of its
    signature, in order, with its type, default and documentation from ``docs`` (a parameter
    without documentation is refused: every keyword is documented); in place of ``**run``, the
    run options (:func:`run_option_entries`)."""
    lines = ["Parameters", "----------"]
    for param in inspect.signature(func).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            lines += run_option_entries()
            continue
        if param.name not in docs:
            raise KeyError(f"{func.__name__}(): no documentation for {param.name!r}")
        lines += entry(param.name, param.annotation, param.default, docs[param.name])
    return "\n".join(lines)


def run_option_entries() -> list[str]:
    """The entries of the run options, the keywords of ``**run: Unpack[RunKeywords]``: each with
    its type (:class:`ctxleak.api.running.RunKeywords`), its default and documentation
    (:class:`ctxleak.run.options.RunOptions`)."""
    defaults = {f.name: f.default for f in fields(RunOptions)}
    docs = run_option_docs()
    lines: list[str] = []
    for name, hint in RunKeywords.__annotations__.items():
        lines += entry(name, getattr(hint, "__forward_arg__", hint), defaults[name], docs[name])
    return lines


def documented(docs: Mapping[str, str], returns: str) -> Callable[[F], F]:
    """Give the decorated function its docstring: its own text (the summary), then the
    ``Parameters`` section (:func:`parameters_section`, from ``docs``), then ``Returns``: the
    function's return annotation, described by ``returns``."""

    def decorate(func: F) -> F:
        summary = inspect.cleandoc(func.__doc__ or "")
        result = type_text(inspect.signature(func).return_annotation)
        func.__doc__ = (f"{summary}\n\n{parameters_section(func, docs)}\n\nReturns\n-------\n"
                        f"{result}\n{fill(returns)}\n")
        return func

    return decorate


def method_docs(params_class: type, data: str) -> dict[str, str]:
    """The documentation of an API function that runs ``params_class`` over a dataset: its
    ``model``, ``data`` (``data``), ``progress`` and the method's parameters (its run options
    are added by :func:`documented`)."""
    return {"model": MODEL_DOC, "data": data, "progress": PROGRESS_DOC,
            **option_docs(params_class)}
