"""The interface of a target: list of questions in, list of answers out.

A black-box attack ("The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented
Generation", Zeng et al.; "Is My Data in Your Retrieval Database?", Anderson et al.) needs
nothing of a RAG system but its answers. A :class:`Target` answers a batch of questions, one
:class:`TargetAnswer` each, in order; it owns its concurrency, rate limit and retries (as
lm-evaluation-harness's ``TemplateAPI`` does), and raises :class:`TargetError` naming the
question when an answer cannot be had. It never needs log-probabilities.

A target may report each answer as soon as it has it (``reports_answers = True``: its
``answer`` takes ``on_answer``, called with the answer's index in the batch and the answer, on
the calling thread), so that a journal commits it before the next is asked
(:class:`~.journal.JournaledTarget`); ctxleak's own targets do.

``describe()`` names the target for a report and for the run's provenance (never a key);
``fingerprint()`` is stable across processes for the same target and settings, so a resumed
audit finds the answers it already has; ``model``, where ctxleak holds the model that writes
its answers (a RAG app's), is named in the run's config. A target can do :data:`ANSWERS` and
nothing else (:mod:`ctxleak.engine.capabilities`).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from ctxleak.engine.capabilities import ANSWERS
from ctxleak.errors import CtxleakError
from ctxleak.mitigations.mechanisms import Claim

#: What every target can do: answer, never give log-probabilities, seeded samples or weights.
CAPABILITIES: frozenset[str] = frozenset({ANSWERS})


#: What a target calls with each answer as soon as it has it: its index in the batch, the answer.
OnAnswer = Callable[[int, "TargetAnswer"], None]


class TargetError(CtxleakError):
    """A target could not answer: which question (its index in the batch), and why.
    ``answered``: the answers it did get before (or beside) the failure, by index in the
    batch, so that a caller keeps them (a journal commits them)."""

    def __init__(self, message: str, *, index: int | None = None,
                 answered: Mapping[int, TargetAnswer] | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.answered: dict[int, TargetAnswer] = dict(answered or {})


@dataclass(frozen=True)
class TargetAnswer:
    """One answer: its text and, where the target also returns them, the retrieved documents'
    ids and texts, and the claim of the defence it was released under (a ``ctxleak serve``
    answer's; ``None``: the target does not say)."""

    text: str
    document_ids: tuple[str, ...] | None = None
    documents: tuple[str, ...] | None = None
    claim: Claim | None = None


class Target(Protocol):
    """Questions in, answers out (the module docstring's contract)."""

    def answer(self, questions: Sequence[str]) -> list[TargetAnswer]:
        """One answer per question, in order."""
        ...

    def describe(self) -> str:
        """The target in a few words, without secrets."""
        ...

    def fingerprint(self) -> str:
        """A stable id of the target and its settings (no secrets)."""
        ...


class ProcessExit(SystemExit):
    """``os._exit(code)`` called by a target's code while ctxleak called it (:func:`no_exit`)."""


class ForeignExit(SystemExit):
    """A ``BaseException`` that is not an error raised by a target's code while ctxleak called
    it (:func:`no_exit`): ``GeneratorExit``, or a class of the user's own. ``raised`` is it."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(1)
        self.raised = raised


def _passes(exc: BaseException) -> bool:
    """Whether ``exc`` leaves a target's call as it is: an error (the call site says whose), an
    exit (:func:`exit_words`), Ctrl-C or SIGTERM (a ``KeyboardInterrupt``: the run stops and
    keeps what it has), a task's cancellation, or a class of ctxleak's own."""
    return isinstance(exc, (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError)) \
        or type(exc).__module__.split(".")[0] == "ctxleak"


_REAL_EXIT = os._exit
_exit_guard = threading.Lock()
_exit_depth = 0
_GUARDED_PID = os.getpid()


def _refuse_exit(status: int) -> NoReturn:
    if os.getpid() != _GUARDED_PID:  # a child forked by the target's code ends as it asks
        _REAL_EXIT(status)
    raise ProcessExit(status)


@contextmanager
def no_exit() -> Iterator[None]:
    """While ctxleak calls a target's (or a retriever's) own code: ``os._exit`` raises
    :class:`ProcessExit` instead of ending the process, restored when the last such call ends
    (threads included); in a child the target's code forks (a process pool), it still ends
    the child. A target may not end the audit's process: that would leave the run
    unfinished, lose the answers not yet journaled and give an exit status (0, or 3, which a
    CI gate reads as "over budget") that says nothing of what happened. Any other
    ``BaseException`` that is not an error (``GeneratorExit``, a class of the user's own) comes
    out as :class:`ForeignExit`. Catch ``SystemExit`` around it (:func:`exit_words` says what
    was called or raised)."""
    global _exit_depth, _GUARDED_PID
    with _exit_guard:
        if _exit_depth == 0:
            _GUARDED_PID = os.getpid()
            os._exit = _refuse_exit
        _exit_depth += 1
    try:
        yield
    except BaseException as exc:
        if _passes(exc):
            raise
        raise ForeignExit(exc) from None
    finally:
        with _exit_guard:
            _exit_depth -= 1
            if _exit_depth == 0:
                os._exit = _REAL_EXIT


def exit_words(exc: SystemExit) -> str:
    """What a target's code called to end the process: ``"called os._exit(3)"``,
    ``"called sys.exit(0)"`` (or raised SystemExit)."""
    if isinstance(exc, ForeignExit):
        said = str(exc.raised).splitlines()[0][:200] if str(exc.raised).strip() else ""
        return (f"raised {type(exc.raised).__name__}{': ' + said if said else ''} (not an "
                f"error: a target's code may raise only Exceptions)")
    how = "os._exit" if isinstance(exc, ProcessExit) else "sys.exit"
    return f"called {how}({exc.code!r}) (a target may not end the audit's process)"


def is_target(obj: object) -> bool:
    """Whether ``obj`` answers as a :class:`Target` does (``answer``, ``describe``,
    ``fingerprint``)."""
    return all(callable(getattr(obj, name, None)) for name in ("answer", "describe",
                                                               "fingerprint"))


#: The prefix of the module a file named ``PATH.py:NAME`` is run as (:mod:`ctxleak.api.retrieval`):
#: its number changes from process to process, so such a function is known by its file instead.
FILE_MODULE_PREFIX = "ctxleak_retriever_"


def code_identity(fn: Any) -> str:
    """What tells a Python function from another of the same name, stable across processes:
    ``module.qualname`` (a function loaded from a file by ctxleak: the file's path) and 16 hex
    digits of the SHA-256 of its source (where Python has none: of its bytecode and
    constants), ``"mod.answer@1f0c..."``. A callable object is known by its class."""
    fn = getattr(fn, "__func__", fn)  # a bound method: its function
    owner = fn if hasattr(fn, "__qualname__") else type(fn)
    module = str(getattr(owner, "__module__", None)
                 or getattr(getattr(fn, "__objclass__", None), "__module__", None) or "?")
    call = vars(type(fn)).get("__call__")  # a callable object's method
    code = getattr(fn, "__code__", None) or getattr(call, "__code__", None)
    if module.startswith(FILE_MODULE_PREFIX) and code is not None:
        module = code.co_filename
    try:
        text = inspect.getsource(fn if hasattr(fn, "__code__") else type(fn))
    except Exception:  # noqa: BLE001 - a builtin, a lambda typed at a prompt, code compiled
        # under another file's name (a docs page's block) whose lines inspect cannot parse
        # (tokenize.TokenError, SyntaxError): its bytecode
        text = "" if code is None else repr((code.co_code, code.co_consts, code.co_names))
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{module}.{getattr(owner, '__qualname__', '?')}@{digest}"


@dataclass(frozen=True)
class FunctionTarget:
    """A plain Python function ``question -> answer`` as a target. It may return a string, or
    a ``(answer, documents)`` pair whose documents are strings or dicts with ``id`` and
    ``text`` (a single string or dict: one document). ``name`` names it in reports; the
    fingerprint holds it and the function's
    :func:`code_identity` (another function of the same name is another target)."""

    fn: Callable[[str], Any]
    name: str = "function"
    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        out: list[TargetAnswer] = []
        for index, question in enumerate(questions):
            try:
                with no_exit():
                    got = self.fn(question)
            except SystemExit as exc:
                raise TargetError(f"{self.name} {exit_words(exc)} on question {index + 1}",
                                  index=index, answered=dict(enumerate(out))) from None
            except Exception as exc:  # the user's function: any failure is its answer's
                raise TargetError(f"{self.name} raised {type(exc).__name__} on question "
                                  f"{index + 1}: {exc}", index=index,
                                  answered=dict(enumerate(out))) from exc
            try:
                out.append(_as_answer(got, self.name, index))
            except TargetError as exc:
                exc.answered = dict(enumerate(out))
                raise
            if on_answer is not None:
                on_answer(index, out[-1])
        return out

    def describe(self) -> str:
        return f"Python function {self.name}"

    def fingerprint(self) -> str:
        return f"function:{self.name}:{code_identity(self.fn)}"


def _as_answer(got: Any, name: str, index: int) -> TargetAnswer:
    """A function's return value as a :class:`TargetAnswer`, or a :class:`TargetError`."""
    docs: Any = None
    if isinstance(got, tuple) and len(got) == 2:
        got, docs = got
    if not isinstance(got, str):
        raise TargetError(f"{name} returned {type(got).__name__} for question {index + 1}: "
                          f"expected the answer as a string", index=index)
    if docs is None:
        return TargetAnswer(got)
    if isinstance(docs, (str, Mapping)):  # one document, not its characters or keys
        docs = [docs]
    if not isinstance(docs, (list, tuple)):
        raise TargetError(f"{name} returned ({type(got).__name__}, {type(docs).__name__}) for "
                          f"question {index + 1}: expected (answer, documents) with the "
                          f"documents a list of strings or of dicts with 'text'", index=index)
    ids, texts = [], []
    for k, doc in enumerate(docs):
        if isinstance(doc, str):
            ids.append(str(k))
            texts.append(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("text"), str):
            ids.append(str(doc.get("id", k)))
            texts.append(doc["text"])
        else:
            raise TargetError(f"{name} returned a document of type {type(doc).__name__} for "
                              f"question {index + 1}: expected a string or a dict with 'text'",
                              index=index)
    return TargetAnswer(got, tuple(ids), tuple(texts))
