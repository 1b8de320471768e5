"""The run's progress bar: it counts the tokens the model computes (reported by the engine's
forward passes, :mod:`ctxleak.engine.progress`), so a batch of five examples moves while it is
measured instead of sitting at 0/5 and jumping to 5/5; its total, and so its ETA, is estimated
from the tokens per finished example. The examples done show beside it. A method whose work
reports no tokens falls back to counting examples.

In a notebook the widget bar is used only when ipywidgets is installed; without it the text
bar (no ``TqdmWarning: IProgress not found``). When stderr is not a terminal (a log file, a
pipe) a redrawn bar would pile up as one endless line of carriage returns, so progress is
written as whole lines instead: one every :data:`LINE_EVERY_S` seconds and one at the end.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from typing import Any, TextIO

from tqdm import tqdm as text_tqdm

#: Seconds between progress lines when stderr is not a terminal.
LINE_EVERY_S = 10.0


class LineProgress:
    """The part of tqdm's interface :class:`RunProgress` uses, written as whole lines (``desc:
    n/total unit, elapsed, about the time left``) at most every ``every`` seconds and once at
    the end: progress for a log file or a pipe."""

    def __init__(self, total: int | None, desc: str, unit: str = "it",
                 unit_scale: bool = False, file: TextIO | None = None, disable: bool = False,
                 every: float | None = None, **_: Any) -> None:
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n, self.postfix, self.disable = 0, "", disable
        self.every = LINE_EVERY_S if every is None else every
        self.file = file if file is not None else sys.stderr
        self.start = self.last = time.monotonic()
        self.closed = False

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.n += n
        self.refresh()

    def reset(self, total: int | None = None) -> None:
        self.n, self.total = 0, total

    def refresh(self) -> None:
        if time.monotonic() - self.last >= self.every:
            self._line()

    def _count(self, value: float) -> str:
        return text_tqdm.format_sizeof(value) if self.unit_scale else f"{value:g}"

    def _line(self) -> None:
        self.last = time.monotonic()
        if self.disable:
            return
        total = f"/{self._count(self.total)}" if self.total else ""
        extra = f", {self.postfix}" if self.postfix else ""
        seconds = self.last - self.start
        elapsed = text_tqdm.format_interval(seconds)
        if self.total and 0 < self.n < self.total:  # at the rate so far, as tqdm's bar says
            left = text_tqdm.format_interval(seconds * (self.total - self.n) / self.n)
            elapsed += f", about {left} left"
        print(f"{self.desc}: {self._count(self.n)}{total} {self.unit}{extra} ({elapsed})",
              file=self.file, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._line()


def tqdm_class() -> Any:
    """``tqdm.auto.tqdm`` where ipywidgets can draw it, else the plain text ``tqdm``."""
    if in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm as auto_tqdm

        return auto_tqdm
    return text_tqdm


def bar_class() -> Any:
    """:func:`tqdm_class` in a notebook or on a terminal, else :class:`LineProgress` (stderr
    is a file or a pipe)."""
    if in_notebook() or _is_terminal(sys.stderr):
        return tqdm_class()
    return LineProgress


def in_notebook() -> bool:
    """Whether this code runs inside a Jupyter kernel: an IPython shell with a kernel (not
    merely ``ipykernel`` imported, as a process that ran a notebook as a client has it)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class RunProgress:
    """Tokens computed (the bar) and examples finished (beside it) of ``total`` examples;
    ``noun`` names what is counted (an attack's queries, a canary's trials)."""

    def __init__(self, total: int, desc: str, *, disable: bool = False,
                 noun: str = "examples") -> None:
        self.total, self.done, self.tokens, self.noun = total, 0, 0, noun
        self.by_examples = False
        self._estimate_due = False
        self.bar = bar_class()(total=None, desc=desc, unit="tok", unit_scale=True,
                                file=sys.stderr, dynamic_ncols=True, disable=disable)
        self._postfix()

    def _postfix(self) -> None:
        if not self.by_examples:
            self.bar.set_postfix_str(f"{self.done}/{self.total} {self.noun}", refresh=False)

    def add_tokens(self, n: int) -> None:
        """``n`` token positions computed (the engine's forward passes)."""
        if self._estimate_due:  # the examples of the last batch are all in: estimate now
            self._estimate()
        self.tokens += n
        if not self.by_examples:
            self.bar.update(n)

    def _estimate(self) -> None:
        """The total from the tokens per finished example (a batch's examples finish
        together, so this waits until all of them are in)."""
        self._estimate_due = False
        estimate = math.ceil(self.tokens / self.done * self.total)
        self.bar.total = self.tokens if self.done >= self.total else max(estimate, self.bar.n)
        self.bar.refresh()

    def example_done(self) -> None:
        """One example finished; the total is re-estimated before the next tokens come."""
        self.done += 1
        if self.tokens == 0 and not self.by_examples:  # nothing reports tokens: count examples
            self.by_examples = True
            self.bar.unit = "ex" if self.noun == "examples" else self.noun
            self.bar.unit_scale = False
            self.bar.set_postfix_str("", refresh=False)
            self.bar.reset(total=self.total)
            self.bar.update(self.done - 1)
        if self.by_examples:
            self.bar.update(1)
            return
        self._estimate_due = True
        self._postfix()
        if self.done >= self.total:
            self._estimate()
        else:
            self.bar.refresh()

    def close(self) -> None:
        if not self.by_examples and self.done >= self.total:
            self.bar.total = self.bar.n
        self.bar.close()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
