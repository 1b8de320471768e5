"""Examples in flight (issue 13): how ``run_method`` groups items for ``Method.measure`` under
``--batch-size auto|N``, and the out-of-memory back-off one level above the engine's."""

from __future__ import annotations

import pytest

from ctxleak.engine.batching import (
    IN_FLIGHT_TOKENS,
    MAX_IN_FLIGHT,
    BatchPolicy,
    next_example_batch,
)
from ctxleak.errors import ConfigError
from ctxleak.run.method import Method, batches_by_cost
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import measure_batch, measure_todo


def _groups(costs, batch_size, device="cpu", cap=None):
    out, start = [], 0
    policy = BatchPolicy.of(batch_size, device=device)
    if cap is not None:
        policy = policy.capped(cap)
    while start < len(costs):
        end = next_example_batch(costs, start, policy)
        out.append(list(range(start, end)))
        start = end
    return out


def test_fixed_batch_size_takes_n_consecutive_examples():
    assert _groups([10] * 7, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _groups([10] * 7, "1") == [[i] for i in range(7)]
    with pytest.raises(ConfigError):
        next_example_batch([1], 0, BatchPolicy.of(0))


def test_auto_fills_the_token_budget_and_balances():
    budget = IN_FLIGHT_TOKENS["cpu"]
    # 5 examples fit per batch, 12 examples -> 3 batches, balanced to 4 each (not 5, 5, 2)
    assert [len(g) for g in _groups([budget // 5] * 12, "auto")] == [4, 4, 4]
    # the example cap: many cheap examples go at most MAX_IN_FLIGHT at a time
    n = MAX_IN_FLIGHT["cpu"] + 1
    assert [len(g) for g in _groups([1] * n, "auto")] == [(n + 1) // 2, n // 2]
    # an example larger than the budget still runs, alone
    assert _groups([budget * 2, 1], "auto") == [[0], [1]]
    # a GPU keeps more in flight; the back-off cap bounds it
    assert len(_groups([1000] * 64, "auto", "cuda")) == 1
    assert [len(g) for g in _groups([1000] * 64, "auto", "cuda", cap=16)] == [16] * 4


def test_examples_without_a_cost_run_alone():
    assert _groups([None, 5, 5, None, 5], "auto") == [[0], [1, 2], [3], [4]]


class Fake(Method):
    """Measures items (ints); runs out of memory with more than ``fits`` at once."""

    def __init__(self, batch_size="auto", fits=2):
        super().__init__(RunOptions(batch_size=batch_size))
        self.fits, self.calls = fits, []

    def batch_cost(self, item):
        return 1

    def batches(self, ready, items, policy):
        return batches_by_cost(items, [self.batch_cost(item) for item in items], policy)

    def measure(self, lm, ready, items):
        self.calls.append(list(items))
        if len(items) > self.fits:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [{"value": 10 * i} for i in items]


def test_out_of_memory_halves_the_batch_and_caps_later_ones():
    method = Fake(fits=3)
    method.batch_cost = lambda item: IN_FLIGHT_TOKENS["cpu"] // 6  # 6 examples per batch
    flat = []
    policy = measure_todo(method, None, None, list(range(12)), BatchPolicy(),
                          lambda item, record: flat.append((item, record)))
    assert flat == [(i, {"value": 10 * i}) for i in range(12)]
    assert policy.max_in_flight == 3
    assert method.calls == [[0, 1, 2, 3, 4, 5], [0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_no_back_off_with_a_fixed_batch_size_or_other_errors():
    with pytest.raises(RuntimeError, match="out of memory"):
        measure_batch(Fake(batch_size=4), None, None, [1, 2, 3, 4], BatchPolicy.of(4))

    class Broken(Fake):
        def measure(self, lm, ready, items):
            raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        measure_batch(Broken(), None, None, [1, 2, 3], BatchPolicy())
