"""RAG systems built with a framework, as targets, recognised by what they have (ctxleak never
imports a framework):

* :class:`RunnableTarget`: a LangChain Runnable (a chain, ``RunnableLambda``) or anything with
  ``.invoke`` (and ``.batch``, used where present, ``concurrency`` at a time). Its output is
  the answer (a string, a message with ``content``) or a dict holding it (``output_key``,
  else ``answer``, ``output``, ``result``, ``text`` or ``response``) and, where the chain
  returns them, the retrieved documents (``documents_key``, else ``context``,
  ``source_documents`` or ``documents``);
* :class:`QueryEngineTarget`: a LlamaIndex query engine (``.query``): the response's text and
  its ``source_nodes`` (each node's source document id, ``ref_doc_id``, where it has one);
* :class:`HaystackTarget`: a Haystack pipeline (``.run``, ``.inputs()``, ``.outputs()``): the
  question goes to the ``inputs`` given (``"component.socket"``), else to every open input
  socket named ``query`` or ``question``; the answer is read from ``output``, else from the one
  output socket named ``replies``, ``answers``, ``answer`` or ``text``; the documents from the
  ``documents`` component given, else from the one component that outputs ``documents``.

:func:`as_target` makes any of them, a :class:`~.base.Target` or a plain function a target.
A failure of the user's object is a :class:`~.base.TargetError` naming the question, with the
answers had before it. ``name`` names the target in reports and in its fingerprint (a resumed
audit finds its answers by it): give each different system its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.targets.base import (
    FunctionTarget,
    OnAnswer,
    Target,
    TargetAnswer,
    TargetError,
    exit_words,
    no_exit,
)

ANSWER_KEYS = ("answer", "output", "result", "text", "response")
DOCUMENT_KEYS = ("context", "source_documents", "documents")
QUESTION_SOCKETS = ("query", "question")
ANSWER_SOCKETS = ("replies", "answers", "answer", "text")


def as_document(item: Any, rank: int) -> tuple[str, str]:
    """(id, text) of one retrieved document of any framework: a string (id = its rank), a dict
    (``text``/``content``/``page_content``, ``id``), a LangChain ``Document``
    (``page_content``, ``id`` or ``metadata["id"]``), a LlamaIndex node or ``NodeWithScore``
    (``ref_doc_id``, else ``node_id``), a Haystack ``Document`` (``content``, ``id``)."""
    if isinstance(item, str):
        return str(rank), item
    if isinstance(item, Mapping):
        text = next((item[k] for k in ("text", "content", "page_content") if k in item), None)
        if isinstance(text, str):
            return str(item.get("id", rank)), text
    node = getattr(item, "node", item)
    if callable(getattr(node, "get_content", None)) and hasattr(node, "node_id"):
        return str(getattr(node, "ref_doc_id", None) or node.node_id), str(node.get_content())
    text = getattr(item, "page_content", None)
    if isinstance(text, str):
        meta = getattr(item, "metadata", None) or {}
        return str(getattr(item, "id", None) or meta.get("id") or rank), text
    text = getattr(item, "content", None)
    if isinstance(text, str):
        return str(getattr(item, "id", None) or rank), text
    raise TypeError(f"a retrieved document of type {type(item).__name__} (no text found)")


def answer_of(text: Any, docs: Any = None) -> TargetAnswer:
    """A :class:`TargetAnswer` from a framework's answer and documents (None: not returned)."""
    content = getattr(text, "content", None)  # a chat message
    text = content if isinstance(content, str) else getattr(text, "text", text)
    text = getattr(text, "data", text)  # a Haystack GeneratedAnswer
    if not isinstance(text, str):
        raise TypeError(f"an answer of type {type(text).__name__}, not text")
    if docs is None:
        return TargetAnswer(text)
    pairs = [as_document(d, k) for k, d in enumerate(docs)]
    return TargetAnswer(text, tuple(i for i, _ in pairs), tuple(t for _, t in pairs))


def _answer_all(questions: Sequence[str], ask: Callable[[int, str], Any],
                read: Callable[[Any], TargetAnswer], kind: str,
                on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
    """``read(ask(k, question))`` for each question, in order, each given to ``on_answer`` as
    it comes; the first failure a :class:`TargetError` with the answers before it."""
    out: list[TargetAnswer] = []
    for k, question in enumerate(questions):
        try:
            with no_exit():
                out.append(read(ask(k, question)))
        except SystemExit as exc:
            raise TargetError(f"the {kind} {exit_words(exc)} on question {k + 1} "
                              f"({question[:60]!r})", index=k,
                              answered=dict(enumerate(out))) from None
        except Exception as exc:  # the user's object: any failure is its answer's
            raise TargetError(f"the {kind} raised {type(exc).__name__} on question {k + 1} "
                              f"({question[:60]!r}): {exc}", index=k,
                              answered=dict(enumerate(out))) from exc
        if on_answer is not None:
            on_answer(k, out[-1])
    return out


class RunnableTarget:
    """A LangChain Runnable or any object with ``.invoke`` (see the module docstring)."""

    def __init__(self, chain: Any, *, input_key: str | None = None,
                 output_key: str | None = None, documents_key: str | None = None,
                 concurrency: int = 4, name: str | None = None) -> None:
        if not callable(getattr(chain, "invoke", None)):
            raise ConfigError(f"a {type(chain).__name__} has no invoke()", param="chain")
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, not {concurrency}", param="concurrency")
        self.chain, self.input_key, self.output_key = chain, input_key, output_key
        self.documents_key, self.concurrency = documents_key, concurrency
        self.name = name or type(chain).__name__

    def _input(self, question: str) -> Any:
        return question if self.input_key is None else {self.input_key: question}

    def _read(self, out: Any) -> TargetAnswer:
        if not isinstance(out, Mapping):
            return answer_of(out)
        key = self.output_key or next((k for k in ANSWER_KEYS if k in out), None)
        if key is None or key not in out:
            raise TypeError(f"its output has no {key or ' or '.join(ANSWER_KEYS)} key "
                            f"(keys: {sorted(out)[:8]}): give output_key")
        docs_key = self.documents_key or next((k for k in DOCUMENT_KEYS if k in out), None)
        return answer_of(out[key], out.get(docs_key) if docs_key else None)

    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        batch = getattr(self.chain, "batch", None)
        kind = f"chain {self.name}"
        if not callable(batch) or len(questions) < 2:
            return _answer_all(questions, lambda _, q: self.chain.invoke(self._input(q)),
                               self._read, kind, on_answer)
        try:
            with no_exit():
                outs = list(batch([self._input(q) for q in questions],
                                  config={"max_concurrency": self.concurrency},
                                  return_exceptions=True))
        except SystemExit as exc:
            raise TargetError(f"the {kind} {exit_words(exc)} on a batch of {len(questions)} "
                              "questions") from None
        except Exception as exc:  # a batch() of the user's own that raises at once
            raise TargetError(f"the {kind} raised {type(exc).__name__} on a batch of "
                              f"{len(questions)} questions: {exc}") from exc
        if len(outs) != len(questions):
            raise TargetError(f"the {kind} gave {len(outs)} answers to {len(questions)} "
                              "questions")
        return _answer_all(questions, lambda k, _: _raised(outs[k]), self._read, kind,
                           on_answer)

    def describe(self) -> str:
        return f"LangChain runnable {self.name}"

    def fingerprint(self) -> str:
        return f"langchain:{self.name}:{self.input_key}:{self.output_key}"


def _raised(got: Any) -> Any:
    """A batch's result, or the exception it holds raised."""
    if isinstance(got, BaseException):
        raise got
    return got


class QueryEngineTarget:
    """A LlamaIndex query engine (``.query``): the response's text and its source nodes."""

    def __init__(self, engine: Any, *, name: str | None = None) -> None:
        if not callable(getattr(engine, "query", None)):
            raise ConfigError(f"a {type(engine).__name__} has no query()", param="engine")
        self.engine, self.name = engine, name or type(engine).__name__

    @staticmethod
    def _read(response: Any) -> TargetAnswer:
        text = getattr(response, "response", response)
        if text is None:
            raise TypeError("its response has no text")
        return answer_of(str(text), getattr(response, "source_nodes", None))

    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        return _answer_all(questions, lambda _, q: self.engine.query(q), self._read,
                           f"query engine {self.name}", on_answer)

    def describe(self) -> str:
        return f"LlamaIndex query engine {self.name}"

    def fingerprint(self) -> str:
        return f"llamaindex:{self.name}"


class HaystackTarget:
    """A Haystack pipeline (see the module docstring for the names given or inferred):
    ``inputs``: ``"component.socket"`` names the question goes to; ``output``: the
    ``"component.socket"`` the answer is read from; ``documents``: the component whose
    ``documents`` output the answer was built from."""

    def __init__(self, pipeline: Any, *, inputs: str | Sequence[str] | None = None,
                 output: str | None = None, documents: str | None = None,
                 name: str | None = None) -> None:
        for method in ("run", "inputs", "outputs"):
            if not callable(getattr(pipeline, method, None)):
                raise ConfigError(f"a {type(pipeline).__name__} has no {method}(): not a "
                                  "Haystack pipeline", param="pipeline")
        self.pipeline, self.name = pipeline, name or type(pipeline).__name__
        self.inputs = _sockets(pipeline.inputs(), inputs, QUESTION_SOCKETS, "inputs")
        [self.output] = _sockets(pipeline.outputs(), output, ANSWER_SOCKETS, "output", one=True)
        self.documents = documents

    def _ask(self, question: str) -> Any:
        data: dict[str, dict[str, str]] = {}
        for comp, socket in self.inputs:
            data.setdefault(comp, {})[socket] = question
        names = [comp for comp, _ in self.pipeline.walk()] if self.documents is None \
            else [self.documents]
        return self.pipeline.run(data, include_outputs_from=set(names))

    def _read(self, result: Any) -> TargetAnswer:
        comp, socket = self.output
        got = result[comp][socket]
        if isinstance(got, list):
            if not got:
                raise TypeError(f"{comp}.{socket} is an empty list")
            got = got[0]
        found = [c for c, out in result.items() if isinstance(out, Mapping)
                 and isinstance(out.get("documents"), list)]
        if self.documents is not None:
            if self.documents not in found:
                raise TypeError(f"the component {self.documents!r} gave no documents")
            found = [self.documents]
        if len(found) > 1:
            raise TypeError(f"components {sorted(found)} all output documents: give "
                            "documents='<component>'")
        return answer_of(got, result[found[0]]["documents"] if found else None)

    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        return _answer_all(questions, lambda _, q: self._ask(q), self._read,
                           f"pipeline {self.name}", on_answer)

    def describe(self) -> str:
        return f"Haystack pipeline {self.name}"

    def fingerprint(self) -> str:
        return f"haystack:{self.name}:{self.inputs}:{self.output}:{self.documents}"


def _sockets(table: Mapping[str, Mapping[str, Any]], given: str | Sequence[str] | None,
             names: Sequence[str], param: str, one: bool = False) -> list[tuple[str, str]]:
    """The (component, socket) pairs named in ``given`` (each ``"component.socket"``), checked
    against the pipeline's ``table``; else those whose socket name is one of ``names``."""
    have = [(c, s) for c, sockets in table.items() for s in sockets]
    if given is None:
        found = [(c, s) for c, s in have if s in names]
    else:
        wanted = [given] if isinstance(given, str) else list(given)
        found = [tuple(w.split(".", 1)) for w in wanted if "." in w]  # type: ignore[misc]
        unknown = [w for w, f in zip(wanted, found) if f not in have] + \
            [w for w in wanted if "." not in w]
        if unknown:
            raise ConfigError(f"{param}: {unknown} are not among the pipeline's sockets "
                              f"{[f'{c}.{s}' for c, s in have]}", param=param)
    shown = [f"{c}.{s}" for c, s in have]
    if not found:
        raise ConfigError(f"{param}: none of the pipeline's sockets {shown} is named "
                          f"{' or '.join(names)}: give {param}='component.socket'", param=param)
    if one and len(found) > 1:
        raise ConfigError(f"{param}: several sockets could hold the answer "
                          f"({[f'{c}.{s}' for c, s in found]}): give {param}='component.socket'",
                          param=param)
    return found


def as_target(obj: Any, **settings: Any) -> Target:
    """``obj`` as a :class:`~.base.Target`: a target as it is; a Haystack pipeline
    (:class:`HaystackTarget`), a LlamaIndex query engine (:class:`QueryEngineTarget`), a
    LangChain Runnable or anything with ``.invoke`` (:class:`RunnableTarget`), each with
    ``settings`` (their keywords); or a function ``question -> answer``
    (:class:`~.base.FunctionTarget`, ``name`` its only setting)."""
    if all(callable(getattr(obj, m, None)) for m in ("answer", "describe", "fingerprint")):
        if settings:
            raise ConfigError(f"a target takes no settings here, not {sorted(settings)}",
                              param=sorted(settings)[0])
        return obj
    if all(callable(getattr(obj, m, None)) for m in ("run", "inputs", "outputs")):
        return HaystackTarget(obj, **settings)
    if callable(getattr(obj, "query", None)):
        return QueryEngineTarget(obj, **settings)
    if callable(getattr(obj, "invoke", None)):
        return RunnableTarget(obj, **settings)
    if callable(obj):
        unknown = sorted(set(settings) - {"name"})
        if unknown:
            raise ConfigError(f"a function target takes only name=, not {unknown}",
                              param=unknown[0])
        return FunctionTarget(obj, str(settings.get("name") or getattr(obj, "__name__", "function")))
    raise ConfigError(f"cannot audit a {type(obj).__name__}: give a chat endpoint target, a "
                      "LangChain Runnable (.invoke), a LlamaIndex query engine (.query), a "
                      "Haystack pipeline (.run) or a function question -> answer",
                      param="target")


__all__ = ["HaystackTarget", "QueryEngineTarget", "RunnableTarget", "answer_of", "as_document",
           "as_target"]
