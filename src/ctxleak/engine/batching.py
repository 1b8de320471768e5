"""Batch planning: longest-first batches under a token budget, and ``--batch-size auto`` that
backs off on out-of-memory errors. Results never depend on the batch size beyond float noise
(tests check this), so the planner is free to choose."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from ctxleak.engine.models import LM

T = TypeVar("T")

# Padded tokens per forward pass for --batch-size auto. On CPU a few thousand tokens already
# saturate the cores; on GPUs we start high and halve on out-of-memory.
TOKEN_BUDGET = {"cpu": 4096, "mps": 8192, "cuda": 65536}


def parse_batch_size(value: str | int | None) -> int | None:
    """``auto`` (or None) -> None; a positive integer otherwise."""
    from ctxleak.run.validate import check_batch_size

    return check_batch_size(value, "batch_size")


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class BatchPlanner:
    """Plans batches for one model; remembers the size that last fitted (``auto``)."""

    def __init__(self, batch_size: int | None = None, device: str = "cpu") -> None:
        self.fixed = batch_size
        kind = "cuda" if str(device).startswith("cuda") else str(device)
        self.token_budget = TOKEN_BUDGET.get(kind, 4096)
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


def planner_for(lm: LM, batch_size: str | int | None = "auto") -> BatchPlanner:
    """The model's shared planner for ``auto`` (so back-off is remembered), or a fixed one."""
    fixed = parse_batch_size(batch_size)
    if fixed is not None:
        return BatchPlanner(fixed, str(lm.device))
    planner = getattr(lm, "_auto_planner", None)
    if planner is None:
        planner = BatchPlanner(None, str(lm.device.type))
        lm._auto_planner = planner  # type: ignore[attr-defined]  # kept with the model it sized
    return planner


# Examples in flight for ``--batch-size auto`` (SPEC §8 "across examples"): at most this many
# token slots in the batched KV caches of the examples measured together, and at most this many
# examples. On this 2-core CPU plain batched sampling gains little past 32 streams (issue 13:
# 22.5 tokens/s at 2 streams, 72.9 at 16, 74.0 at 32); GPUs keep gaining far longer, and the
# out-of-memory back-off of :func:`ctxleak.run.runner.measure_items` halves a batch that does
# not fit.
IN_FLIGHT_TOKENS = {"cpu": 16384, "mps": 32768, "cuda": 524288}
MAX_IN_FLIGHT = {"cpu": 16, "mps": 32, "cuda": 512}


def device_kind(device: object) -> str:
    """``cuda``, ``mps`` or ``cpu`` for a device or its name."""
    name = str(getattr(device, "type", device))
    return "cuda" if name.startswith("cuda") else name


def next_example_batch(costs: Sequence[int | None], start: int,
                       batch_size: str | int | None, device: object = "cpu",
                       cap: int | None = None) -> int:
    """The end of the batch of examples that begins at ``start``: consecutive examples (so
    records are appended in item order), ``batch_size`` of them when it is a number; under
    ``auto`` as many as fit in :data:`IN_FLIGHT_TOKENS` (``costs[i]``: the token slots example i
    keeps in flight) and :data:`MAX_IN_FLIGHT` (and ``cap``, learnt from out-of-memory
    back-off), balanced so that the batches left have about the same size. A cost of None means
    the example is measured alone."""
    n = len(costs)
    if start >= n:
        return n
    if costs[start] is None:
        return start + 1
    fixed = parse_batch_size(batch_size)
    kind = device_kind(device)
    most = fixed if fixed is not None else min(MAX_IN_FLIGHT.get(kind, 16), cap or n)
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
