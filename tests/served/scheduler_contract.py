"""Run by tests/served/test_served_plugin_contracts.py in the vLLM server's environment (.venv-vllm):
ctxleak's pairing scheduler against vLLM's own schedulers, driven as vLLM's engine drives them
(``schedule``, then ``update_from_output`` with a token per request; under asynchronous
scheduling two steps in flight, as the engine's batch queue keeps them) on a server config of
a tiny model (tests/served/v2_contract.py).

- ``--scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler`` is built as vLLM's
  ``Scheduler`` with the pairing where ``async_scheduling`` is off, and as an
  ``AsyncScheduler`` (``AsyncPairingScheduler``) where it is on;
- on a mix of plain requests and CID pairs (one pair whose second request comes two steps
  after the first, one whose partner never comes and is let go once held too long), the plain
  requests are scheduled in the same steps, in the same order and with the same token counts as
  by vLLM's own scheduler, and both requests of every pair are first scheduled in one step,
  which vLLM's own scheduler does not do;
- a held request keeps its place in the waiting queue: behind a request that did not fit the
  step's token budget, it stays behind it.

Prints one JSON line.
"""

from __future__ import annotations

import json
import time
from collections import deque

import torch
from v2_contract import tiny_config
from vllm import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from ctxleak.plugins.protocol import pair_xargs
from ctxleak.plugins.vllm_pairing import (
    HOLD_SECONDS,
    AsyncPairingScheduler,
    PairingScheduler,
    pair_of,
)

BLOCK = 16


def scheduler(cls, *, async_on: bool, budget: int = 1024):
    config = tiny_config()
    config.scheduler_config.async_scheduling = async_on
    config.scheduler_config.max_num_batched_tokens = budget
    config.cache_config.num_gpu_blocks = 400
    config.cache_config.enable_prefix_caching = False  # requests here carry no block hashes
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1,
                             dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=400, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    return cls(vllm_config=config, kv_cache_config=kv,
               structured_output_manager=StructuredOutputManager(config), block_size=BLOCK)


def request(name: str, prompt: list[int], max_tokens: int, xargs=None):
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, extra_args=xargs)
    return Request(name, prompt, params, None)


def pair(k: int, context: list[int], empty: list[int], max_tokens: int):
    pid = f"{k:x}" * 32
    xargs = pair_xargs(pair=pid, context_ids=context, lam=0.5, temperature=0.8, seed=k,
                       greedy=False, eps=None, min_new_tokens=0, stops=[0])
    return (lambda: request(f"{pid[:4]}-ctx", context, max_tokens, xargs),
            lambda: request(f"{pid[:4]}-empty", empty, max_tokens, xargs))


def workload():
    """Step -> the requests that arrive then (fresh objects for every run)."""
    a_ctx, a_empty = pair(1, list(range(1, 30)), list(range(20, 30)), 5)
    b_ctx, b_empty = pair(2, list(range(3, 40)), list(range(30, 40)), 4)
    c_ctx, _ = pair(3, list(range(5, 25)), [9], 3)
    d_ctx, d_empty = pair(4, list(range(2, 21)), list(range(11, 21)), 6)
    plain = [lambda k=k: request(f"plain-{k}", list(range(1, 8 + 3 * k)), 2 + k % 4)
             for k in range(9)]
    return {0: [plain[0], a_ctx, a_empty, plain[1]],
            1: [b_ctx, plain[2]],
            2: [plain[3], plain[4]],
            3: [b_empty, plain[5], lambda: _old(c_ctx)],
            4: [d_empty, plain[6], d_ctx],
            6: [plain[7], plain[8]]}


def _old(make):
    """A request of a pair whose partner never comes, held past HOLD_SECONDS already."""
    r = make()
    r.arrival_time = time.time() - 2 * HOLD_SECONDS
    return r


def drive(sched, *, in_flight: int, steps: int = 30):
    """Each step's scheduled requests in order, with their token counts."""
    arrivals, log, queue = workload(), [], deque()
    for step in range(steps):
        for make in arrivals.get(step, []):
            sched.add_request(make())
        out = sched.schedule()
        log.append(list(out.num_scheduled_tokens.items()))
        queue.append(out)
        while len(queue) >= in_flight or (queue and step == steps - 1):
            done = queue.popleft()
            ids = list(done.num_scheduled_tokens)
            sched.update_from_output(done, ModelRunnerOutput(
                req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=[[7] for _ in ids]))
    return log


def plain_steps(log):
    return [[(r, n) for r, n in step if r.startswith("plain")] for step in log]


def first_steps(log):
    first: dict[str, int] = {}
    for k, step in enumerate(log):
        for r, _ in step:
            first.setdefault(r, k)
    return first


def compare(async_on: bool) -> dict:
    theirs_cls = AsyncScheduler if async_on else Scheduler
    ours = scheduler(PairingScheduler, async_on=async_on)
    assert type(ours) is (AsyncPairingScheduler if async_on else PairingScheduler)
    assert isinstance(ours, AsyncScheduler) == async_on
    theirs = scheduler(theirs_cls, async_on=async_on)
    in_flight = 2 if async_on else 1
    mine, vllms = drive(ours, in_flight=in_flight), drive(theirs, in_flight=in_flight)
    assert plain_steps(mine) == plain_steps(vllms), (plain_steps(mine), plain_steps(vllms))
    got, want = first_steps(mine), first_steps(vllms)
    for k in ("1111", "2222", "4444"):
        assert got[f"{k}-ctx"] == got[f"{k}-empty"], (k, got)
    assert want["2222-ctx"] < want["2222-empty"]  # vLLM's own: the first stream goes alone
    assert "3333-ctx" in got  # the lone request held too long is let go
    return {"class": type(ours).__name__, "steps": len(mine),
            "plain_scheduled": sum(len(s) for s in plain_steps(mine)),
            "pair_b_first_step": got["2222-ctx"]}


def held_keeps_its_place() -> list[str]:
    """A budget of 40 tokens: a 36-token plain request fills it, the next (30 tokens) waits,
    a lone pair request behind it is held, a plain one behind that waits too; after the step
    the queue is in the order they came."""
    sched = scheduler(PairingScheduler, async_on=False, budget=40)
    lone, _ = pair(5, list(range(1, 12)), [3], 3)
    for r in (request("big", list(range(1, 37)), 2), request("next", list(range(1, 31)), 2),
              lone(), request("last", list(range(1, 5)), 2)):
        sched.add_request(r)
    out = sched.schedule()
    assert list(out.num_scheduled_tokens) == ["big"], out.num_scheduled_tokens
    order = [r.request_id for r in sched.waiting]
    assert order == ["next", "5555-ctx", "last"], order
    assert pair_of(sched.waiting.peek_request()) is None
    return order


def main() -> None:
    print(json.dumps({"sync": compare(False), "async": compare(True),
                      "queue_after_hold": held_keeps_its_place()}))


if __name__ == "__main__":
    main()
