"""The Method: what a method tells :func:`ctxleak.run.run_method`, in eight hooks.

A method is maths: it never opens files, prints or builds HTML, and it keeps no state between
its hooks. What one hook prepares is returned and handed to the next. ``over``, the first
argument of ``prepare``, ``measure`` and ``provenance``, is what answers: a model (any backend),
or for the black-box attacks a :class:`ctxleak.targets.base.Target`, as the subclass annotates.

1. ``plan(data) -> Plan``: the work items, the method's part of ``config.json``, the input
   files that resume checks, the model-load overrides, the questions a target is asked, and
   ``state`` (what reading the data prepared: examples, their index, controls); checked first;
2. ``ids(item) -> ItemIds``: the item's ``key`` (its line in ``samples.jsonl``, what resume goes
   by) and the user's own ``example_id`` (the row's ``id``; by default the key);
3. ``requires()``: the operations the run needs (capability -> why,
   :mod:`ctxleak.engine.capabilities`); a backend or target that lacks one is refused before
   the first request;
4. ``prepare(over, plan, run) -> ReadyT``: once, after the model is loaded (scorers, trained
   soft prompts, run-scoped counters), returned, not stored;
5. ``batches(ready, items, policy)``: the items still to measure, grouped into the lists given to
   ``measure`` (default: :func:`batches_by_cost` with no cost, one item at a time unless the
   batch size says otherwise);
6. ``measure(over, ready, items)``: one record per item, in order;
7. ``summarize(ready, records)``: the ``summary`` of ``results.json``;
8. ``provenance(over, ready)``: what the provenance adds (prompt templates).

A method whose own options are one frozen params dataclass subclasses :class:`ParamsMethod`,
which binds ``XMethod(common=None, params=None)`` once. A Result and its report are made above
the run layer, from the plain data the run returns (:func:`ctxleak.results.finish_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

from ctxleak.engine.batching import BatchPolicy, next_example_batch
from ctxleak.engine.capabilities import DESCRIPTIONS, IN_PROCESS
from ctxleak.run.options import RunOptions
from ctxleak.run.rundir import RunDir

ItemT = TypeVar("ItemT")
StateT = TypeVar("StateT")
ReadyT = TypeVar("ReadyT")
ParamsT = TypeVar("ParamsT")


@dataclass(frozen=True)
class Plan(Generic[ItemT, StateT]):
    """What :meth:`Method.plan` makes of the data, before any model is loaded."""

    items: list[ItemT]
    config: dict[str, Any]  # the method's part of config.json (checked on resume)
    state: StateT  # what reading the data prepared, for the later hooks
    inputs: dict[str, Any] = field(default_factory=dict)  # {"data": path}: SHA-256 on resume
    load_options: dict[str, Any] = field(default_factory=dict)  # RunOptions overrides to load
    questions: Sequence[str] = ()  # a target's, one per item: cost and max_queries checked first
    # the questions are chosen from the answers as they come (an adaptive attack's): as many as
    # ``questions`` are asked, not these; max_queries is checked on their number
    questions_later: bool = False


@dataclass(frozen=True)
class ItemIds:
    """An item's ``key`` (unique in the run, what resume goes by) and the user's ``example_id``
    (returned untouched as the row's ``id``; its setting goes in columns of its own)."""

    key: str
    example_id: str | int


def batches_by_cost(items: Sequence[ItemT], costs: Sequence[int | None],
                    policy: BatchPolicy) -> Iterable[list[ItemT]]:
    """Consecutive items, as many per batch as ``policy.batch_size`` says (``auto``: as many as
    fit the token budget of examples in flight on ``policy.device``, from each item's token
    slots ``costs``, None: measured alone; capped by ``policy.max_in_flight`` after an
    out-of-memory back-off; see :func:`ctxleak.engine.batching.next_example_batch`)."""
    start = 0
    while start < len(items):
        end = next_example_batch(costs, start, policy)
        yield list(items[start:end])
        start = end


class Method(Generic[ItemT, StateT, ReadyT]):
    """Base of every method object: the defaults of the optional hooks.

    Subclasses set ``name`` (the command, stored as ``config["command"]``; its Result class and
    report view go by it) and ``private`` (folder 0700, files 0600: every method reads user
    text, so the default). The object holds only its options.
    """

    name: ClassVar[str] = "method"
    desc: ClassVar[str] = "examples"
    #: What one item is, plural, as the progress bar and the resume line count them.
    unit: ClassVar[str] = "examples"
    private: ClassVar[bool] = True

    def __init__(self, common: RunOptions | None = None) -> None:
        self.common = (common or RunOptions()).check()

    def plan(self, data: Any) -> Plan[ItemT, StateT]:
        raise NotImplementedError

    def ids(self, item: ItemT) -> ItemIds:
        key = str(cast(Any, item).key)
        return ItemIds(key, key)

    def requires(self) -> dict[str, str]:
        """Default: every operation (a method that states nothing runs in-process only)."""
        return {c: f"{self.name} uses {DESCRIPTIONS[c]}: run it with the model loaded "
                   "in-process" for c in sorted(IN_PROCESS)}

    def prepare(self, over: Any, plan: Plan[ItemT, StateT], run: RunDir) -> ReadyT:
        """Default: the plan's state as it is."""
        return cast(ReadyT, plan.state)

    def batches(self, ready: ReadyT, items: Sequence[ItemT],
                policy: BatchPolicy) -> Iterable[list[ItemT]]:
        return batches_by_cost(items, [None] * len(items), policy)

    def measure(self, over: Any, ready: ReadyT, items: Sequence[ItemT]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def summarize(self, ready: ReadyT, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def provenance(self, over: Any, ready: ReadyT) -> dict[str, Any]:
        return {}


class ParamsMethod(Method[ItemT, StateT, ReadyT], Generic[ItemT, StateT, ReadyT, ParamsT]):
    """A Method whose own options are one frozen params dataclass (``ParamsT``), bound here once:
    ``XMethod(common=None, params=None)`` holds the run options ``common`` and ``params``
    (None: ``params_type()``, the defaults), then calls :meth:`derive`.

    Subclasses set ``params_type`` (the params class, or any callable that makes the defaults)
    and, when they read settings out of their params, override :meth:`derive`.
    """

    params_type: ClassVar[Callable[[], Any]]

    def __init__(self, common: RunOptions | None = None, params: ParamsT | None = None) -> None:
        super().__init__(common)
        self.params: ParamsT = params if params is not None else type(self).params_type()
        self.derive()

    def derive(self) -> None:
        """The settings the later hooks read, derived from ``params`` (and ``common``) when the
        Method is made, so that invalid parameters raise :class:`ctxleak.errors.ConfigError`
        there, before any data is read or model loaded. Default: none."""
