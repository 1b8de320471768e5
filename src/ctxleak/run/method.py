"""The Method protocol: what a method tells :func:`ctxleak.run.run_method`.

A method never opens files, prints or builds HTML itself; it says how to:

- ``items(data)``: turn its data into work items (checked before any model is loaded);
- ``key(item)``: name an item (the ``key`` of its line in ``samples.jsonl``, used by resume);
  ``example_id(item)`` gives the user's own id of the example, the row's ``id`` (by default
  the key: items that are one example each), so that results merge back onto the user's table;
- ``measure(lm, items)``: measure a *list* of items, one record per item, in order;
- ``summarize(records)``: summarise all records into the ``summary`` of ``results.json``.

What is shown of a finished run (page, figures, console table) is built from its Result alone
by the method's report view (:data:`ctxleak.registry.REPORTS`, by ``name``), not here.

Optional hooks have defaults here: ``setup(lm, run)`` once after the model is loaded (scorers,
trained soft prompts), ``batch_cost(item)`` and ``batches(items, policy)`` to group the items
measured together (the run's :class:`~ctxleak.engine.batching.BatchPolicy`, which the engine also
keeps: a method never branches on it), ``provenance_extra(lm)`` for prompt templates,
``requires()`` for the model operations it needs (:mod:`ctxleak.engine.capabilities`; a
backend that lacks one is refused before the first request).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from ctxleak.engine.batching import BatchPolicy, next_example_batch
from ctxleak.engine.capabilities import DESCRIPTIONS, IN_PROCESS
from ctxleak.engine.lm import LanguageModel
from ctxleak.run.options import RunOptions


class Method:
    """Base of every method object: the defaults of the optional hooks.

    Subclasses set ``name`` (the command, stored as ``config["command"]``; its Result class and
    report view are registered under it in :mod:`ctxleak.registry`) and ``private`` (folder
    0700, files 0600: every method reads user text, so the default).
    """

    name: ClassVar[str] = "method"
    desc: ClassVar[str] = "examples"
    private: ClassVar[bool] = True

    def __init__(self, common: RunOptions | None = None) -> None:
        self.common = (common or RunOptions()).check()

    # ---- required ------------------------------------------------------------------------
    def config(self, data: Any) -> dict[str, Any]:
        """The method's part of ``config.json`` (checked on resume): its options serialised,
        with ``data`` described; computed from the options and ``data`` alone."""
        raise NotImplementedError

    def items(self, data: Any) -> list[Any]:
        raise NotImplementedError

    def key(self, item: Any) -> str:
        return str(item.key)

    def example_id(self, item: Any) -> str | int:
        """The user's id of the example ``item`` measures, returned untouched as the row's
        ``id`` (its setting goes in columns of its own); the key by default."""
        return self.key(item)

    def measure(self, lm: LanguageModel, items: Sequence[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    # ---- optional ------------------------------------------------------------------------
    def inputs(self, data: Any) -> dict[str, Any]:
        """The input files of the run (``{"data": path}``) whose SHA-256 resume checks, from the
        options and ``data``. Names like ``demo`` resolve to their file; rows in memory are
        hashed as themselves."""
        return {}

    def load_options(self) -> dict[str, Any]:
        """Overrides of :class:`RunOptions` when loading the model (not stored in the config)."""
        return {}

    def setup(self, lm: LanguageModel, run: Any) -> None:
        """Once, after the model is loaded and before any item is measured."""

    def batch_cost(self, item: Any) -> int | None:
        """Token slots ``item`` keeps in flight when measured together with other items (its
        streams times their prompt and new tokens), or None to measure it alone (the default)."""
        return None

    def batches(self, todo: Sequence[Any], policy: BatchPolicy) -> Iterable[list[Any]]:
        """The items still to measure, grouped into the lists given to :meth:`measure`:
        consecutive items, as many as ``policy.batch_size`` says (``auto``: as many as fit the
        token budget of examples in flight on ``policy.device``, capped by
        ``policy.max_in_flight`` after an out-of-memory back-off; see
        :func:`ctxleak.engine.batching.next_example_batch`)."""
        costs = [self.batch_cost(item) for item in todo]
        start = 0
        while start < len(todo):
            end = next_example_batch(costs, start, policy)
            yield list(todo[start:end])
            start = end

    def provenance_extra(self, lm: LanguageModel) -> dict[str, Any]:
        return {}

    def requires(self) -> dict[str, str]:
        """The model operations this run needs, given its options: capability name
        (:mod:`ctxleak.engine.capabilities`) -> why, and what to do instead, in the words of
        a refusal. Default: all of them (a method that states nothing runs in-process only)."""
        return {c: f"{self.name} uses {DESCRIPTIONS[c]}: run it with the model loaded "
                   "in-process" for c in sorted(IN_PROCESS)}

