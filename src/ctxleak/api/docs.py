"""The API functions' docstrings, written from the options themselves: each keyword's line is
its field's documentation (:func:`ctxleak.run.params.option_docs` of the method's parameters and
of :class:`ctxleak.run.options.RunOptions`), so the run options are documented once, in
``RunOptions``, and every function shows them in numpydoc form."""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

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


def parameters_section(func: Callable[..., Any], docs: Mapping[str, str]) -> str:
    """The numpydoc ``Parameters`` section of ``func``: one entry per parameter of its
    signature, in order, with its type, default and documentation from ``docs`` (a parameter
    without documentation is refused: every keyword is documented)."""
    lines = ["Parameters", "----------"]
    for param in inspect.signature(func).parameters.values():
        if param.name not in docs:
            raise KeyError(f"{func.__name__}(): no documentation for {param.name!r}")
        head = f"{param.name} : {type_text(param.annotation)}"
        if param.default is not inspect.Parameter.empty:
            head += f", default {default_text(param.default)}"
        lines.append(head)
        lines.append(textwrap.fill(" ".join(docs[param.name].split()), WIDTH,
                                   initial_indent="    ", subsequent_indent="    ",
                                   break_on_hyphens=False, break_long_words=False))
    return "\n".join(lines)


def documented(docs: Mapping[str, str], returns: str) -> Callable[[F], F]:
    """Give the decorated function its docstring: its own text (the summary), then the
    ``Parameters`` section (:func:`parameters_section`, from ``docs``), then ``Returns``: the
    function's return annotation, described by ``returns``."""

    def decorate(func: F) -> F:
        summary = inspect.cleandoc(func.__doc__ or "")
        result = type_text(inspect.signature(func).return_annotation)
        body = textwrap.fill(" ".join(returns.split()), WIDTH, initial_indent="    ",
                             subsequent_indent="    ", break_on_hyphens=False,
                             break_long_words=False)
        func.__doc__ = (f"{summary}\n\n{parameters_section(func, docs)}\n\nReturns\n-------\n"
                        f"{result}\n{body}\n")
        return func

    return decorate


def method_docs(params_class: type, data: str) -> dict[str, str]:
    """The documentation of an API function that runs ``params_class`` over a dataset: its
    ``model``, ``data`` (``data``), ``progress``, the method's parameters and the run
    options."""
    return {"model": MODEL_DOC, "data": data, "progress": PROGRESS_DOC,
            **option_docs(params_class), **run_option_docs()}
