"""A streamed answer of the privacy proxy: decoded and settled in a task of its own, each token
sent to the client as OpenAI ``chat.completion.chunk`` server-sent events as its mechanism
decides it (Context Influence Decoding, Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models, Def. 3.4, bounded: App. B, Alg. 1, as each token is drawn; a
defence that decodes the whole answer first, such as a DP vote, once it is whole). And the
settling of any answer, streamed or not (:func:`settle_released`): an answer whose figures come
after its release (a served model's own sample at λ = 1, T = 1) is released at once and settled
once they are computed.

The task tells the stream what happened through a queue of events: ``("token", id)`` for each
decided token, then ``("done", (reply, ctxleak field))`` or ``("failed", exception)``."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool

from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.mechanisms import Listener, MechanismAnswer
from ctxleak.proxy.answering import Reply, scored
from ctxleak.proxy.charging import Charging
from ctxleak.proxy.chat_request import ChatRequest, Document
from ctxleak.proxy.errors import failed_midway
from ctxleak.proxy.fields import answer_fields
from ctxleak.proxy.held import Held
from ctxleak.proxy.view import client_view

#: One event of the decoding task: its kind (``token``, ``done``, ``failed``) and value.
Event = tuple[str, Any]
log = logging.getLogger("ctxleak.proxy")

#: The proxy's answering: the request, its documents and a listener for its tokens.
Answer = Callable[[ChatRequest, Sequence[Document], Listener | None], Reply]


class _Sent:
    """Hears the answer's tokens in the decoding thread: each one is put in ``events`` and what
    it spent is kept (for a failure midway)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, events: asyncio.Queue[Event]) -> None:
        self.loop, self.events = loop, events
        self.spent: list[float | None] = []

    def token(self, k: int, token_id: int, spent: float | None) -> None:
        self.spent.append(spent)
        self.loop.call_soon_threadsafe(self.events.put_nowait, ("token", token_id))

    def done(self, k: int, answer: MechanismAnswer) -> None:
        pass


async def answer_and_settle(answer: Answer, charging: Charging, request: ChatRequest,
                            held: Held, events: asyncio.Queue[Event],
                            later: set[asyncio.Future[None]]) -> None:
    """Answer the request, each decided token put in ``events`` as it comes, then settle its
    budget (:func:`settle_released`, a settling after the release kept in ``later``); whatever
    happens, the last event says how it ended. A client that goes away mid-answer changes
    nothing: what was drawn is charged (a failed decoding: the tokens already sent, nothing if
    none was; a failed ledger: the reservation stays open)."""
    sent = _Sent(asyncio.get_running_loop(), events)
    outcome: Event = ("failed", RuntimeError("the answer was not finished"))
    try:  # whatever happens, the stream hears how it ended
        try:
            reply = await run_in_threadpool(answer, request, held.docs, sent)
        except Exception as exc:
            outcome = ("failed", exc)
            await charging.settle_drawn(held, sent.spent)  # the tokens sent are spent
            return
        try:
            outcome = ("done", await settle_released(charging, request, held, reply, later))
        except Exception as exc:  # the ledger itself failed: the reservation stays open
            outcome = ("failed", exc)
            return
    finally:
        events.put_nowait(outcome)


async def settle_released(charging: Charging, request: ChatRequest, held: Held, reply: Reply,
                          later: set[asyncio.Future[None]]) -> tuple[Reply, dict[str, Any]]:
    """The answer to release and its ``ctxleak`` field. An answer is settled first
    (:meth:`Charging.settle`). One whose figures come after its release (a served model's own
    sample at λ = 1, T = 1: nothing it spends is known before it is scored, and its
    reservation, made before decoding, is zero) is released at once, its field without them
    (``influence`` null), and settled in a task kept in ``later`` until done."""
    if reply.answer.later is None:
        return reply, await charging.settle(request, reply, held)
    info = answer_fields(request, reply, held, None)
    task = asyncio.ensure_future(_score_and_settle(charging, request, held, reply))
    later.add(task)
    task.add_done_callback(later.discard)
    return reply, info


async def _score_and_settle(charging: Charging, request: ChatRequest, held: Held,
                            released: Reply) -> None:
    """Compute a released answer's figures (score it with and without its documents), settle
    its reservation and log its influence; if the scoring fails, the reservation is settled on
    the released tokens (:meth:`Charging.settle_drawn`) and the failure logged."""
    try:
        reply = await run_in_threadpool(scored, released)
    except Exception as exc:
        log.warning(json.dumps({"event": "cid_scoring_failed", "id": held.rid,
                                "error": type(exc).__name__}))
        await charging.settle_drawn(held, [None] * released.tokens)
        return
    try:
        await charging.settle(request, reply, held)
    except Exception:  # the ledger failed: the reservation stays open, charged in full
        log.exception("the ledger failed settling a released answer")
        return
    influence = reply.figures.get("influence")
    log.info(json.dumps({"event": "cid_scored", "id": held.rid,
                         "influence": influence if influence is not None
                         and math.isfinite(influence) else None}))


async def sse_chunks(lm: LanguageModel, rid: str, request: ChatRequest, first: Event,
                     events: asyncio.Queue[Event]) -> AsyncIterator[str]:
    """The answer as OpenAI ``chat.completion.chunk`` server-sent events: the role, then a
    chunk for each drawn token as soon as its text is complete, then the finish reason with
    the ``ctxleak`` field (and the usage when asked), then ``[DONE]``. A failure mid-answer
    is an ``error`` event, as OpenAI's streams carry one."""
    head = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.model}

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return f"data: {json.dumps({**head, 'choices': [choice], **extra})}\n\n"

    yield event({"role": "assistant", "content": ""})
    ids: list[int] = []
    sent = ""
    stops = set(lm.eos_ids)
    kind, value = first
    while kind == "token":
        if value not in stops:  # the stopping EOS is no text
            ids.append(value)
            text = lm.decode(ids)
            if text.startswith(sent) and len(text) > len(sent):
                yield event({"content": text[len(sent):]})
                sent = text
        kind, value = await events.get()
    if kind == "failed":
        error = failed_midway(value, len(ids), lm.info.source == "served")
        yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"
        return
    answer, info = value
    if answer.text.startswith(sent) and len(answer.text) > len(sent):
        yield event({"content": answer.text[len(sent):]})
    yield event({}, answer.finish_reason, ctxleak=client_view(info, request))
    if request.include_usage:  # OpenAI's last chunk: no choices, the usage
        yield f"data: {json.dumps({**head, 'choices': [], 'usage': answer.usage})}\n\n"
    yield "data: [DONE]\n\n"
