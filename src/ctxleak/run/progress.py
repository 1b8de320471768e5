"""The run's progress bar: it counts the tokens the model computes (reported by the engine's
forward passes, :mod:`ctxleak.engine.progress`), so a batch of five examples moves while it is
measured instead of sitting at 0/5 and jumping to 5/5; its total, and so its ETA, is estimated
from the tokens per finished example. The examples done show beside it. A method whose work
reports no tokens falls back to counting examples.

In a notebook the widget bar is used only when ipywidgets is installed; without it the text
bar (no ``TqdmWarning: IProgress not found``).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any

from tqdm import tqdm as text_tqdm


def tqdm_class() -> Any:
    """``tqdm.auto.tqdm`` where ipywidgets can draw it, else the plain text ``tqdm``."""
    if "ipykernel" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm as auto_tqdm

        return auto_tqdm
    return text_tqdm


class RunProgress:
    """Tokens computed (the bar) and examples finished (beside it) of ``total`` examples."""

    def __init__(self, total: int, desc: str, *, disable: bool = False) -> None:
        self.total, self.done, self.tokens = total, 0, 0
        self.by_examples = False
        self._estimate_due = False
        self.bar = tqdm_class()(total=None, desc=desc, unit="tok", unit_scale=True,
                                file=sys.stderr, dynamic_ncols=True, disable=disable)
        self._postfix()

    def _postfix(self) -> None:
        if not self.by_examples:
            self.bar.set_postfix_str(f"{self.done}/{self.total} examples", refresh=False)

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
            self.bar.unit, self.bar.unit_scale = "ex", False
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
