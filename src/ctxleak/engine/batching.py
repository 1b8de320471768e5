"""Batching, decided once: the run's :class:`BatchPolicy`, longest-first batches under a token
budget, ``--batch-size auto`` that backs off on out-of-memory errors, and the scope in which
scoring calls share the reference prefixes they computed (:func:`shared_prefixes`).

The run layer builds one :class:`BatchPolicy` from its options and hands it to the model
(:func:`using`); every engine call then reads it from the model (:func:`policy_of`), so no method
chooses batch sizes or branches on batch invariance. Under a batch-invariant policy scoring keeps
each example's rows in forward passes of their own (:func:`example_passes`) and generation
recomputes each example's floats alone (:func:`ctxleak.engine.generation.replay`): a sample's
bytes then do not depend on the batch size nor on the examples in flight. Otherwise results
depend on the batch only by float noise (tests check this), so the planner is free to choose.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import torch

from ctxleak.engine.batch_size import check_batch_size

T = TypeVar("T")

# Padded tokens per forward pass for --batch-size auto. On CPU a few thousand tokens already
# saturate the cores; on GPUs we start high and halve on out-of-memory.
TOKEN_BUDGET = {"cpu": 4096, "mps": 8192, "cuda": 65536}


@dataclass(frozen=True)
class BatchPolicy:
    """How a run batches, decided once from its options and kept by the engine.

    ``batch_size``: a fixed number (rows per scoring pass, examples in flight) or None for
    ``auto`` (token budgets, halved on out-of-memory). ``invariant``: every float of a sample
    comes from forward passes over its own example only, so samples are byte-identical whatever
    the batch size or the examples measured with them (scoring passes hold one example's rows,
    generation's floats are replayed per example). ``device``: the model's device type, which
    sets the ``auto`` budgets. ``max_in_flight``: a cap on the examples measured together,
    learnt by the run layer's out-of-memory back-off.

    The default is what a bare engine call does outside a run: ``auto``, passes shared across
    examples."""

    batch_size: int | None = None
    invariant: bool = False
    device: str = "cpu"
    max_in_flight: int | None = None

    @classmethod
    def of(cls, batch_size: str | int | None = "auto", invariant: bool = False,
           device: object = "cpu") -> BatchPolicy:
        """The policy of a run's ``batch_size`` (``auto`` or N), ``batch_invariant`` and the
        model's device (a ``torch.device`` or its name)."""
        return cls(check_batch_size(batch_size), bool(invariant), device_kind(device))

    @property
    def scoring_batch_size(self) -> int | None:
        """Rows per scoring pass: the token budget alone (``auto``, None) when invariant, so a
        sample's floats never depend on ``batch_size``; otherwise ``batch_size``."""
        return None if self.invariant else self.batch_size

    def capped(self, max_in_flight: int) -> BatchPolicy:
        """This policy with at most ``max_in_flight`` examples measured together."""
        return replace(self, max_in_flight=max_in_flight)


class Batched(Protocol):
    """What carries a batching policy: every :class:`~ctxleak.engine.lm.LanguageModel`."""

    batching: BatchPolicy


B = TypeVar("B", bound=Batched)


def policy_of(lm: Batched) -> BatchPolicy:
    """The batching policy the model was handed (:func:`using`), or the default one."""
    policy = getattr(lm, "batching", None)
    return policy if isinstance(policy, BatchPolicy) else BatchPolicy()


@contextmanager
def using(lm: B, policy: BatchPolicy) -> Iterator[B]:
    """Hand ``policy`` to the model for the duration of the block (a run), then restore the
    previous one; copies of the model made inside (a fine-tuned canary) keep it."""
    before = lm.batching
    lm.batching = policy
    try:
        yield lm
    finally:
        lm.batching = before


def example_passes(policy: BatchPolicy, examples: Sequence[Hashable]) -> list[list[int]]:
    """The request indices that may share forward passes, given the example each request belongs
    to: one list per example (in order of first appearance) under a batch-invariant policy, so
    that an example's floats come from passes that hold its rows only; otherwise one list of
    them all."""
    if not policy.invariant:
        return [list(range(len(examples)))] if len(examples) else []
    parts: dict[Hashable, list[int]] = {}
    for i, example in enumerate(examples):
        parts.setdefault(example, []).append(i)
    return list(parts.values())


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class BatchPlanner:
    """Plans batches for one model; remembers the size that last fitted (``auto``)."""

    def __init__(self, batch_size: int | None = None, device: str = "cpu") -> None:
        self.fixed = batch_size
        self.token_budget = TOKEN_BUDGET.get(device_kind(device), 4096)
        self.max_rows: int | None = None  # learnt from out-of-memory back-off

    def run(self, costs: Sequence[int], fn: Callable[[list[int]], Sequence[T]],
            order: Sequence[int] | None = None,
            joins: Callable[[list[int], int], bool] | None = None) -> list[T]:
        """Call ``fn`` on batches of item indices and return its results in item order.

        ``costs[i]`` is the padded length item i adds to a batch; items go longest first (or in
        ``order``) so that an out-of-memory error comes on the first batch, not the last.
        ``joins(batch, i)`` may refuse item i a place in a batch (it then starts the next one).
        """
        n = len(costs)
        order = list(order) if order is not None else sorted(range(n), key=lambda i: -costs[i])
        results: list[Any] = [None] * n
        start = 0
        while start < n:
            batch = self._take(order, start, costs, joins)
            try:
                outs = fn(batch)
            except Exception as exc:
                if not is_out_of_memory(exc) or len(batch) == 1 or self.fixed is not None:
                    raise
                self.max_rows = max(1, len(batch) // 2)
                print(f"[ctxleak] out of memory with batch {len(batch)}; retrying with "
                      f"{self.max_rows}", file=sys.stderr)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            for i, out in zip(batch, outs):
                results[i] = out
            start += len(batch)
        return results

    def _take(self, order: Sequence[int], start: int, costs: Sequence[int],
              joins: Callable[[list[int], int], bool] | None) -> list[int]:
        batch: list[int] = []
        width = 0
        for i in order[start:]:
            new_width = max(width, costs[i])
            if self.fixed is not None:
                full = len(batch) >= self.fixed
            else:
                full = (new_width * (len(batch) + 1) > self.token_budget
                        or (self.max_rows is not None and len(batch) >= self.max_rows))
            if batch and (full or (joins is not None and not joins(batch, i))):
                break
            batch.append(i)
            width = new_width
        return batch


class OnDevice(Protocol):
    """What :func:`planner_for` reads of a model (a :class:`~ctxleak.engine.lm.LanguageModel`;
    not imported here, as the interface imports this module for :class:`BatchPolicy`)."""

    @property
    def device(self) -> torch.device: ...


def planner_for(lm: OnDevice, batch_size: str | int | None = "auto") -> BatchPlanner:
    """The model's shared planner for ``auto`` (so back-off is remembered), or a fixed one."""
    fixed = check_batch_size(batch_size)
    if fixed is not None:
        return BatchPlanner(fixed, str(lm.device))
    planner = getattr(lm, "_auto_planner", None)
    if planner is None:
        planner = BatchPlanner(None, str(lm.device.type))
        lm._auto_planner = planner  # type: ignore[attr-defined]  # kept with the model it sized
    return planner


# Examples in flight for ``--batch-size auto`` (batching across examples): at most this many
# token slots in the batched KV caches of the examples measured together, and at most this many
# examples. On this 2-core CPU plain batched sampling gains little past 32 streams (measured:
# 22.5 tokens/s at 2 streams, 72.9 at 16, 74.0 at 32); GPUs keep gaining far longer, and the
# out-of-memory back-off of :func:`ctxleak.run.runner.measure_items` halves a batch that does
# not fit.
IN_FLIGHT_TOKENS = {"cpu": 16384, "mps": 32768, "cuda": 524288}
MAX_IN_FLIGHT = {"cpu": 16, "mps": 32, "cuda": 512}


def device_kind(device: object) -> str:
    """``cuda``, ``mps`` or ``cpu`` for a device or its name."""
    name = str(getattr(device, "type", device))
    return "cuda" if name.startswith("cuda") else name


def next_example_batch(costs: Sequence[int | None], start: int, policy: BatchPolicy) -> int:
    """The end of the batch of examples that begins at ``start``: consecutive examples (so
    records are appended in item order), ``policy.batch_size`` of them when it is a number;
    under ``auto`` as many as fit in :data:`IN_FLIGHT_TOKENS` of ``policy.device``
    (``costs[i]``: the token slots example i keeps in flight) and :data:`MAX_IN_FLIGHT` (and
    ``policy.max_in_flight``, learnt from out-of-memory back-off), balanced so that the batches
    left have about the same size. A cost of None means the example is measured alone."""
    n = len(costs)
    if start >= n:
        return n
    if costs[start] is None:
        return start + 1
    fixed = policy.batch_size
    kind = device_kind(policy.device)
    most = fixed if fixed is not None else min(MAX_IN_FLIGHT.get(kind, 16),
                                               policy.max_in_flight or n)
    budget = None if fixed is not None else IN_FLIGHT_TOKENS.get(kind, 16384)

    def greedy(begin: int, limit: int) -> int:
        end, used = begin, 0
        while end < n and end - begin < limit and costs[end] is not None:
            cost = int(costs[end])  # type: ignore[arg-type]
            if budget is not None and end > begin and used + cost > budget:
                break
            used += cost
            end += 1
        return end

    if fixed is not None:
        return greedy(start, most)
    # balance: as many batches as greedy filling needs, each about the same number of examples
    count, i = 0, start
    while i < n and costs[i] is not None:
        i = greedy(i, most)
        count += 1
    even = -(-(i - start) // max(count, 1))
    return greedy(start, max(1, even))


#: Reference KV caches kept across scoring calls inside :func:`shared_prefixes`, by their ids
#: (and the ids of the cache they were built on: the in-process backend's,
#: :func:`ctxleak.engine.local.scoring.reference_cache`).
SHARED_PREFIXES: ContextVar[OrderedDict[Hashable, Any] | None] = ContextVar(
    "ctxleak_shared_prefixes", default=None)
#: How many reference caches :func:`shared_prefixes` keeps (the most recently used).
SHARED_PREFIXES_KEPT = 64


@contextmanager
def shared_prefixes() -> Iterator[None]:
    """Inside: every scoring call with prefix reuse takes the KV cache of a reference prefix
    (the prompt before the scored tokens) from the ones already computed with the same token
    ids, the last :data:`SHARED_PREFIXES_KEPT` of them, and a request alone in its group reuses
    its own prompt's cache as well. The settings of a sweep score one example's responses
    after the same prompts: each prompt is then computed once, not once per setting, its
    variants' included (:func:`keeps_variants`). Each cache is one batch-1 pass over exactly
    those ids (or one on another prompt's cache,
    :func:`~ctxleak.engine.local.scoring.reference_cache`), as it would be computed again, so
    the numbers are those of a request scored without the others (batch invariance holds, and
    a sweep's records are those of each setting's own run); the caches are only read
    (:func:`~ctxleak.engine.forward.expand_cache` copies). A served model leaves this to its
    server's prefix cache."""
    token = SHARED_PREFIXES.set(OrderedDict())
    try:
        yield
    finally:
        SHARED_PREFIXES.reset(token)


def keeps_variants() -> bool:
    """Inside :func:`shared_prefixes`: a prompt's few variants (a document left out) keep KV
    caches of their own prompts (built on the full prompt's), so that a sweep's settings, each
    scoring another answer after the same variants, compute each variant's prompt once; one
    setting alone computes each variant's tokens after the document once too, unpadded, where
    a shared pass pads every variant to the longest."""
    return SHARED_PREFIXES.get() is not None
