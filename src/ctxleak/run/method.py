"""The Method protocol (SPEC §11, DESIGN): what a method tells :func:`ctxleak.run.run_method`.

A method never opens files, prints or builds HTML itself; it says how to:

- ``items(data)``: turn its data into work items (checked before any model is loaded);
- ``key(item)``: name an item (the ``id`` of its line in ``samples.jsonl``, used by resume);
- ``measure(lm, items)``: measure a *list* of items, one record per item, in order;
- ``summarize(records)``: summarise all records into the ``summary`` of ``results.json``;
- ``report(result)``: build the HTML report of a finished run from its :class:`Result`.

Optional hooks have defaults here: ``setup(lm, run)`` once after the model is loaded (scorers,
trained soft prompts), ``batch_cost(item)`` and ``batches(items)`` to group the items measured together,
``artifacts(result)`` for extra files (plots, texts), ``provenance_extra(lm)`` for prompt templates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from ctxleak.run.options import RunOptions


class Method:
    """Base of every method object: the defaults of the optional hooks.

    Subclasses set ``name`` (the command, stored as ``config["command"]``), ``result_class``
    (the :class:`ctxleak.results.Result` subclass) and ``private`` (folder 0700, files 0600:
    every method reads user text, so the default).
    """

    name: ClassVar[str] = "method"
    desc: ClassVar[str] = "examples"
    private: ClassVar[bool] = True
    result_class: ClassVar[Any] = None
    device: str = "cpu"  # the model's device type, set by the run layer before batching
    max_in_flight: int | None = None  # items per batch after an out-of-memory back-off

    def __init__(self, common: RunOptions | None = None) -> None:
        self.common = (common or RunOptions()).check()

    # ---- required ------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The method's part of ``config.json`` (checked on resume)."""
        raise NotImplementedError

    def items(self, data: Any) -> list[Any]:
        raise NotImplementedError

    def key(self, item: Any) -> str:
        return str(item.key)

    def measure(self, lm: Any, items: Sequence[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def report(self, result: Any, lm: Any = None) -> Any:
        """A :class:`ctxleak.report.Report` for ``result`` (``lm``: the model, when at hand)."""
        raise NotImplementedError

    # ---- optional ------------------------------------------------------------------------
    def inputs(self) -> dict[str, Any]:
        """The input files of the run (``{"data": path}``) whose SHA-256 resume checks; called
        after :meth:`items`. Names like ``demo`` resolve to their file; rows in memory have none."""
        return {}

    def load_options(self) -> dict[str, Any]:
        """Overrides of :class:`RunOptions` when loading the model (not stored in the config)."""
        return {}

    def setup(self, lm: Any, run: Any) -> None:
        """Once, after the model is loaded and before any item is measured."""

    def batch_cost(self, item: Any) -> int | None:
        """Token slots ``item`` keeps in flight when measured together with other items (its
        streams times their prompt and new tokens), or None to measure it alone (the default)."""
        return None

    def batches(self, todo: Sequence[Any]) -> Iterable[list[Any]]:
        """The items still to measure, grouped into the lists given to :meth:`measure`:
        consecutive items, as many as ``batch_size`` says (``auto``: as many as fit the token
        budget of examples in flight on ``self.device``, see
        :func:`ctxleak.engine.batching.next_example_batch`; ``self.max_in_flight``, lowered by
        the run layer's out-of-memory back-off, caps it)."""
        from ctxleak.engine.batching import next_example_batch

        costs = [self.batch_cost(item) for item in todo]
        start = 0
        while start < len(todo):
            end = next_example_batch(costs, start, self.common.batch_size, self.device,
                                     self.max_in_flight)
            yield list(todo[start:end])
            start = end

    def each_alone(self, items: Sequence[Any],
                   measure: Callable[[list[Any], str | int | None], list[dict[str, Any]]]
                   ) -> list[dict[str, Any]]:
        """``measure(items, scoring_batch_size)`` for a method that only scores. Batch-invariant
        runs (``common.batch_invariant``, issue 13) measure each item alone, rows per pass from
        the token budget, so that its floats never depend on the other items in flight nor on
        ``batch_size``; otherwise all the items at once, in shared passes of ``batch_size``."""
        if self.common.batch_invariant:
            return [record for item in items for record in measure([item], "auto")]
        return measure(list(items), self.common.batch_size)

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        """Extra files of the run directory (plots as PNG bytes, texts), by file name."""
        return {}

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        return {}

